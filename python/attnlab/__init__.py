"""attnlab from Python: load a checkpoint, run it with a cache, with hooks and
for gradients at named hook points, on attnlab's own engine (docs/python.md).

    import attnlab
    m = attnlab.load("runs/induction")              # a run folder (its newest checkpoint) or a checkpoint file
    logits, cache = m.run_with_cache([3, 7, 5, 3, 7], names="blocks.*.attn.pattern")
    logits = m.run_with_hooks(tokens, {"blocks.1.attn.z": lambda z, name: z * 0})
    run = attnlab.train("configs/induction.toml", train__steps=500)   # the CLI's training, its run folder
    grid = attnlab.patch(run, clean=[...], corrupt=[...])               # the CLI's .patch.h5 as arrays

Tokens are a list of ids (one sequence), a list of lists (sequences of any
lengths, right-padded and given lengths), a (batch, positions) integer array
(with `lengths=` for padding), or text for a text model. Bad input raises
ValueError (a KeyError for a hook name that matches no point, FileNotFoundError
for a missing file) whose message is the CLI's.
"""
import os
import tomllib

import numpy as np

from attnlab import _core
from attnlab.commands import CommandError, ablate, lens, patch, read_h5, train

__all__ = ["load", "Model", "train", "patch", "ablate", "lens", "read_h5", "CommandError"]


def _checkpoint_path(path):
    """A checkpoint file, or a run folder's newest checkpoint (as the CLI's CHECKPOINT)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        folder = os.path.join(path, "checkpoints")
        saved = sorted(name for name in (os.listdir(folder) if os.path.isdir(folder) else [])
                       if name.startswith("step_") and name.endswith(".h5") and name[5:-3].isdigit())
        if not saved:
            raise FileNotFoundError(f"{path}: a folder without checkpoints/step_*.h5 (give a checkpoint file or a run folder)")
        return os.path.join(folder, saved[-1])
    if not os.path.exists(path):
        raise FileNotFoundError(f"[checkpoint] {path}: no such file")
    return path


def load(path, device="cpu"):
    """The model of a checkpoint file or of a run folder's newest checkpoint."""
    return Model(_checkpoint_path(path), device)


_INT32 = np.iinfo(np.int32)


def _patterns(names):
    if names is None:
        return ["*"]
    if isinstance(names, str):
        return [n for n in names.split(",")]
    return list(names)


class Model:
    """A checkpoint's model, in eval mode, on `device` ("cpu" or "cuda")."""

    def __init__(self, path, device="cpu"):
        self._core = _core.Model(os.fspath(path), device)
        self.path = self._core.path
        self.step = self._core.step
        #: the checkpoint's config: {"task": {...}, "model": {...}, ...}
        self.config = tomllib.loads(self._core.config_toml)
        #: the longest input the model was trained on (a learned positional table covers no more)
        self.positions = self._core.positions
        #: hook point name -> its axes, outermost first ("batch", "query_pos", "head", ...)
        self.hook_points = dict(self._core.hook_points())

    def __repr__(self):
        m = self.config["model"]
        return (f"<attnlab.Model {self.path} step {self.step}: {m['kind']}, {m['layers']} layers, width {m['width']}, "
                f"{m['heads']} heads, task {self.config['task']['name']}>")

    @property
    def params(self):
        """name -> array, the checkpoint's names. CPU parameters are the model's own
        storage (no copy): writing into one changes the model."""
        return self._core.params()

    def to_tokens(self, text):
        """A text model's characters as token ids."""
        return self._core.to_tokens(text)

    def to_text(self, ids):
        return self._core.to_text([int(i) for i in np.asarray(ids).ravel()])

    def _batch(self, tokens, lengths):
        """(int32 array (B, T), lengths) from any accepted form of tokens."""
        array, given = self._padded(tokens, lengths)
        if array.dtype != np.int32 and (np.any(array < _INT32.min) or np.any(array > _INT32.max)):
            raise ValueError("tokens: ids beyond int32")
        return np.ascontiguousarray(array, dtype=np.int32), given

    def _padded(self, tokens, lengths):
        """(integer array (B, T), lengths; [] for full rows) from any accepted form of tokens."""
        if isinstance(tokens, str):
            tokens = self.to_tokens(tokens)
        if isinstance(tokens, np.ndarray):
            if tokens.dtype.kind not in "iu":  # signed or unsigned integers (np.issubdtype(..., np.integer), faster)
                raise ValueError(f"tokens: expected integer token ids, got dtype {tokens.dtype}")
            array = tokens[None, :] if tokens.ndim == 1 else tokens
            if array.ndim != 2:
                raise ValueError(f"tokens: expected a (batch, positions) array, got {array.ndim} axes")
            return array, list(lengths) if lengths is not None else []
        rows = list(tokens)
        if rows and all(isinstance(r, (int, np.integer)) for r in rows):
            rows = [rows]
        if not rows or any(isinstance(r, (int, np.integer)) or len(r) == 0 for r in rows):
            raise ValueError("tokens: expected token ids, a list of sequences, an integer array or text; got an empty or mixed list")
        width = max(len(r) for r in rows)
        array = np.zeros((len(rows), width), dtype=np.int64)
        for i, r in enumerate(rows):
            array[i, :len(r)] = [int(t) for t in r]
        return array, list(lengths) if lengths is not None else [len(r) for r in rows]

    def _source(self, src, src_lengths):
        return (None, []) if src is None else self._batch(src, src_lengths)

    def run(self, tokens, lengths=None, src=None, src_lengths=None):
        """The logits (batch, positions, vocab), float32."""
        logits, _ = self._run(tokens, lengths, [], {}, src, src_lengths)
        return logits

    def run_with_cache(self, tokens, names=None, lengths=None, src=None, src_lengths=None):
        """(logits, {point: activation}) for every point a pattern of `names` matches
        (exact names or globs, a list or a comma-separated string; default all)."""
        return self._run(tokens, lengths, _patterns(names), {}, src, src_lengths)

    def run_with_hooks(self, tokens, hooks, lengths=None, src=None, src_lengths=None, names=()):
        """The logits with `hooks` ({pattern: fn}) applied: fn(activation, name)
        returns None (observe) or an array of the same shape and dtype that the
        forward continues with. With `names`, also the cache of those points:
        (logits, cache)."""
        logits, cache = self._run(tokens, lengths, _patterns(names) if names else [], hooks, src, src_lengths)
        return (logits, cache) if names else logits

    def grad(self, tokens, metric, names, lengths=None, src=None, src_lengths=None):
        """(value, {point: d value / d activation}) for the points of `names`.
        `metric` is a function of the logits array returning (value, d value /
        d logits), or an array W of the logits' shape for the metric sum(W * logits)."""
        batch, given = self._batch(tokens, lengths)
        src_array, src_given = self._source(src, src_lengths)
        if callable(metric):
            logits = self.run(tokens, lengths, src, src_lengths)
            out = metric(logits)
            if not (isinstance(out, tuple) and len(out) == 2):
                raise ValueError("grad: metric(logits) must return (value, d value / d logits)")
            value, seed = out
            seed = np.asarray(seed, dtype=logits.dtype)
            _, grads = self._core.grad(batch, given, seed, _patterns(names), src_array, src_given)
            return float(value), grads
        seed = np.asarray(metric)
        return self._core.grad(batch, given, seed, _patterns(names), src_array, src_given)

    def _run(self, tokens, lengths, record, hooks, src, src_lengths):
        batch, given = self._batch(tokens, lengths)
        src_array, src_given = self._source(src, src_lengths)
        if not isinstance(hooks, dict):
            raise ValueError("hooks: expected a dict {hook point pattern: function}")
        for pattern, fn in hooks.items():
            if not callable(fn):
                raise ValueError(f"hooks: the value for {pattern!r} is not callable")
        return self._core.run(batch, given, record, list(hooks.items()), src_array, src_given)

    def match(self, pattern):
        """The hook points a pattern names (exact or a glob over the whole name)."""
        return [name for name in self.hook_points if _core.pattern_matches(pattern, name)]
