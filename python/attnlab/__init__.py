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
or a torch integer tensor (1-D: one sequence), with `lengths=` for padding, or
text for a text model. A bad argument raises TypeError (a wrong type) or
ValueError (a wrong value) naming it (python/attnlab/inputs.py checks them all
before anything runs); a KeyError for a hook name that matches no point,
FileNotFoundError for a missing file; the engine's refusals carry the CLI's
message.
"""
import os
import tomllib

import numpy as np

from attnlab import _core, inputs
from attnlab.commands import CommandError, ablate, lens, patch, read_h5, train

__all__ = ["load", "Model", "train", "patch", "ablate", "lens", "read_h5", "CommandError"]


def _checkpoint_path(path):
    """A checkpoint file, or a run folder's newest checkpoint (as the CLI's CHECKPOINT)."""
    path = inputs.path(path, "path")
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


class Model:
    """A checkpoint's model, in eval mode, on `device` ("cpu" or "cuda")."""

    def __init__(self, path, device="cpu"):
        path = inputs.path(path, "path")
        device = inputs.text(device, "device")
        self._core = _core.Model(path, device)
        self.path = self._core.path
        self.step = self._core.step
        #: the checkpoint's config: {"task": {...}, "model": {...}, ...}
        self.config = tomllib.loads(self._core.config_toml)
        #: the longest input the model was trained on (a learned positional table covers no more)
        self.positions = self._core.positions
        #: hook point name -> its axes, outermost first ("batch", "query_pos", "head", ...)
        self.hook_points = dict(self._core.hook_points())
        self._vocab = int(self.config["task"]["vocab"])

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
        return self._core.to_tokens(inputs.text(text, "text"))

    def to_text(self, ids):
        """A text model's token ids (one sequence) as characters."""
        ids = inputs.as_numpy(ids)
        if isinstance(ids, (list, tuple, range, np.ndarray)) and len(ids) == 0:
            return self._core.to_text([])
        array, _ = inputs.token_rows(ids, "ids", self._vocab)
        if array.shape[0] != 1:
            raise ValueError(f"ids: to_text takes one sequence, got {array.shape[0]}")
        return self._core.to_text([int(i) for i in array[0]])

    def _batch(self, tokens, lengths, what="tokens", lengths_what="lengths"):
        """(int32 array (B, T), lengths; [] for full rows) from any accepted form of tokens."""
        if isinstance(tokens, str):
            tokens = self.to_tokens(tokens)
        array, ragged = inputs.token_rows(tokens, what, self._vocab)
        given = inputs.lengths(lengths, lengths_what, array.shape[0], array.shape[1])
        if given is None:
            given = ragged or []
        return np.ascontiguousarray(array, dtype=np.int32), given

    def _source(self, src, src_lengths):
        if src is None:
            if src_lengths is not None:
                raise ValueError("src_lengths: given without src")
            return None, []
        return self._batch(src, src_lengths, "src", "src_lengths")

    def run(self, tokens, lengths=None, src=None, src_lengths=None):
        """The logits (batch, positions, vocab), float32."""
        logits, _ = self._run(tokens, lengths, [], [], src, src_lengths)
        return logits

    def run_with_cache(self, tokens, names=None, lengths=None, src=None, src_lengths=None):
        """(logits, {point: activation}) for every point a pattern of `names` matches
        (exact names or globs, a list or a comma-separated string; default all)."""
        return self._run(tokens, lengths, inputs.names(names, "names", ["*"]), [], src, src_lengths)

    def run_with_hooks(self, tokens, hooks, lengths=None, src=None, src_lengths=None, names=()):
        """The logits with `hooks` ({pattern: fn}) applied: fn(activation, name)
        returns None (observe) or an array of the same shape and dtype that the
        forward continues with. With `names`, also the cache of those points:
        (logits, cache)."""
        record = inputs.names(names, "names", [])
        logits, cache = self._run(tokens, lengths, record, inputs.hook_functions(hooks), src, src_lengths)
        return (logits, cache) if record else logits

    def grad(self, tokens, metric, names, lengths=None, src=None, src_lengths=None):
        """(value, {point: d value / d activation}) for the points of `names`.
        `metric` is a function of the logits array returning (value, d value /
        d logits), or an array W of the logits' shape for the metric sum(W * logits).
        Either way the gradient may be any real array; it is cast to the logits' dtype."""
        batch, given = self._batch(tokens, lengths)
        src_array, src_given = self._source(src, src_lengths)
        patterns = inputs.names(names, "names", ["*"])
        if callable(metric):
            logits, _ = self._core.run(batch, given, [], [], src_array, src_given)
            out = metric(logits)
            if not (isinstance(out, tuple) and len(out) == 2):
                raise TypeError(f"metric: metric(logits) must return (value, d value / d logits), got {inputs.describe(out)}")
            value, seed = out
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"metric: the value metric(logits) returned is {inputs.describe(value)}, not a number")
            seed = inputs.real_array(seed, "metric: the gradient metric(logits) returned")
            _, grads = self._core.grad(batch, given, seed, patterns, src_array, src_given)
            return float(value), grads
        seed = inputs.real_array(metric, "metric")
        return self._core.grad(batch, given, seed, patterns, src_array, src_given)

    def _run(self, tokens, lengths, record, hooks, src, src_lengths):
        batch, given = self._batch(tokens, lengths)
        src_array, src_given = self._source(src, src_lengths)
        return self._core.run(batch, given, record, hooks, src_array, src_given)

    def match(self, pattern):
        """The hook points a pattern names (exact or a glob over the whole name)."""
        pattern = inputs.text(pattern, "pattern")
        return [name for name in self.hook_points if _core.pattern_matches(pattern, name)]
