"""Every analysis command agrees with the model, on every architecture option.

    /usr/bin/python3 tests/cli/test_analysis_matrix.py ATTNLAB REPO_ROOT POSITIONAL

For one positional encoding (the argument: ctest runs one test per encoding),
every combination of norm placement and type (pre/post x LayerNorm/RMSNorm, and
none), model kind (decoder, encoder-decoder) and K/V heads (2 heads each, or
grouped: 1 K/V head for 2) is trained for a few steps, and each command is run
on its checkpoint and checked against the model's own forward, computed
independently by tools/torch_bridge.py (the documented architecture in PyTorch):

  audit                every live test passes (exit 0)
  generate             --check-cache: every cached step equals the full pass
  inspect              logits, every attention map and hidden state = the bridge's
  cache                the cached logits = the bridge's on the cached tokens
  eval, ablate         the loss = the mean cross-entropy of the bridge's logits on
                       the same data (cache's /targets and /loss_mask)
  patch                the unpatched runs' logit differences = the bridge's; the
                       last block's output patched whole restores the clean run (1)
  path-patch           sender "all" into a head's q = patching that head's q
  lens                 its last stream = the model's logits; the direct logit
                       attribution (pre-norm) sums to the target logit

and the same for the attention variants and the options imported models need.

Tolerances scale with what is compared: 1e-4 * max(1, max |value|) (float32
computed in another order on both sides).
"""
import itertools
import os
import re
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_common as cc  # noqa: E402

POSITIONAL = None  # argv[3]
NORMS = [("pre", "layernorm"), ("pre", "rmsnorm"), ("pre", "scalenorm"), ("post", "layernorm"), ("post", "rmsnorm"),
         ("post", "scalenorm"), ("none", "layernorm")]
KINDS = ["decoder", "encoder-decoder"]
KV_HEADS = [0, 1]  # 0: one K/V head per query head; 1: grouped, both heads read one

BASE = {
    "model.width": "16", "model.heads": "2", "model.layers": "2", "model.ffn": "32",
    "train.steps": "30", "train.batch": "8", "train.log_every": "10", "train.eval_every": "30",
    "train.checkpoint_every": "30", "train.eval_batches": "1", "train.threads": "1",
}
CLEAN = "3 9 4 12 5 1 5 12 4"
CORRUPT = "3 8 4 11 5 1 5 12 4"
PROMPT = "5 9 4 12"


def limit(*arrays):
    return 1e-4 * max(1.0, *(float(np.max(np.abs(a))) for a in arrays))


def cross_entropy(logits, targets, mask):
    """Mean -log softmax(logits)[target] over the positions where mask is set."""
    logits = logits.astype(np.float64)
    top = logits.max(axis=-1, keepdims=True)
    log_z = top[..., 0] + np.log(np.exp(logits - top).sum(axis=-1))
    picked = np.take_along_axis(logits, targets[..., None].astype(np.int64), axis=-1)[..., 0]
    return float(((log_z - picked) * mask).sum() / mask.sum())


class Matrix(cc.TempDirTest):
    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.join(cc.REPO_ROOT, "tools"))
        import torch_bridge
        cls.bridge = torch_bridge

    def train(self, norm, norm_type, kind, kv_heads, extra=None):
        config = dict(BASE, **(extra or {}), **{"model.positional": POSITIONAL, "model.norm": norm, "model.norm_type": norm_type,
                               "model.kv_heads": str(kv_heads), "model.kind": kind,
                               "task.name": "translate" if kind == "encoder-decoder" else "copy",
                               "run.out_dir": self.path("runs")})
        r = cc.attnlab(["train"] + [f"{k}={v}" for k, v in config.items()], self.tmp, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return cc.checkpoint_path(self.path("runs", "default"), int(BASE["train.steps"]))

    def ok(self, args):
        r = cc.attnlab(args, self.tmp, timeout=120)
        self.assertEqual(r.returncode, 0, f"attnlab {' '.join(args)}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
        return r

    def forward(self, module, arch, rows):
        logits, _, _ = self.bridge.run(module, arch, rows)
        return logits.numpy()

    def test_every_option(self):
        for (norm, norm_type), kind, kv in itertools.product(NORMS, KINDS, KV_HEADS):
            with self.subTest(norm=norm, norm_type=norm_type, kind=kind, kv_heads=kv):
                self.check_one(norm, norm_type, kind, kv)
                self.clear()

    def check_variant(self, extra, kinds=KINDS, texts=None):
        """An attention variant (autograd/variant.h) in every analysis: pre/LayerNorm and
        post/RMSNorm, both model kinds (or `kinds`), grouped K/V; `texts`: the clean, corrupt
        and prompt tokens when not CLEAN, CORRUPT and PROMPT."""
        for (norm, norm_type), kind in itertools.product([("pre", "layernorm"), ("post", "rmsnorm")], kinds):
            with self.subTest(norm=norm, norm_type=norm_type, kind=kind, **extra):
                self.check_one(norm, norm_type, kind, 1, extra, texts)
                self.clear()

    def clear(self):
        for name in os.listdir(self.tmp):
            cc.shutil.rmtree(self.path(name), ignore_errors=True) if os.path.isdir(self.path(name)) else os.remove(self.path(name))

    def test_softcap(self):
        """Logit soft-capping (model.softcap), a score modifier: attention composed of ops."""
        self.check_variant({"model.softcap": "1.5"})

    def test_window(self):
        """A sliding window (model.window), an eligibility rule: the fused kernels and the KV cache apply it."""
        self.check_variant({"model.window": "4"})

    def test_prefix_lm(self):
        """Prefix-LM (model.prefix_lm), a rule read off the tokens: the prompt holds its prefix through <SEP> (1)."""
        self.check_variant({"model.prefix_lm": "true"}, kinds=["decoder"], texts=(CLEAN, CORRUPT, "5 9 4 1"))

    def test_documents(self):
        """Packed documents (model.documents, task.pack), a rule read off the tokens: <BOS> (2) starts a document."""
        self.check_variant({"model.documents": "true", "model.prefix_lm": "true", "task.pack": "30"}, kinds=["decoder"],
                           texts=("3 9 1 3 9 2 5 9 4 12 5 1 5 12 4", "3 8 1 3 8 2 5 8 4 11 5 1 5 12 4", "4 1 4 2 5 9 1"))

    def test_sinks(self):
        """Attention sinks (model.sinks), a learned logit per head: attention composed of ops."""
        self.check_variant({"model.sinks": "true"})

    def test_relative_bias(self):
        """T5's relative bias (model.rel_buckets), a learned table per layer: attention composed of ops."""
        self.check_variant({"model.rel_buckets": "8", "model.rel_max_distance": "6"})

    def test_imported_model_options(self):
        """The options `attnlab import` gives GPT-2, GPT-NeoX and TransformerLens models: tanh GELU,
        a norm epsilon, parallel attention and feed-forward, a head bias, partial rotary (with rotary
        positions); decoder, pre-norm (what parallel blocks take), LayerNorm and RMSNorm, grouped K/V."""
        extra = {"model.activation": "gelu_tanh", "model.norm_eps": "0.001", "model.parallel": "true", "model.head_bias": "true"}
        if POSITIONAL == "rotary":
            extra["model.rotary_dims"] = "4"  # of a head width 8
        for norm_type in ("layernorm", "rmsnorm"):
            with self.subTest(norm_type=norm_type, **extra):
                self.check_one("pre", norm_type, "decoder", 1, extra)
                self.clear()

    def check_one(self, norm, norm_type, kind, kv, extra=None, texts=None):
        clean_text, corrupt_text, prompt = texts or (CLEAN, CORRUPT, PROMPT)
        ckpt = self.train(norm, norm_type, kind, kv, extra)
        module, arch, _, _ = self.bridge.build_module(ckpt)
        decoder = kind == "decoder"

        # audit: every live test passes
        self.ok(["audit", ckpt])
        # generate: the cached decode equals full passes at every step
        self.ok(["generate", ckpt, "--prompt", prompt, "--max-new", "6", "--check-cache"])

        # inspect: logits, attention and hidden states against the bridge
        inspect = self.path("inspect.h5")
        self.ok(["inspect", ckpt, "--tokens", clean_text if decoder else prompt, "--out", inspect])
        rows, ref = self.bridge.read_inspect(inspect, arch, self.bridge.read_checkpoint(ckpt)[2], -1)
        logits, weights, hidden = self.bridge.run(module, arch, rows)
        np.testing.assert_allclose(ref["logits"], logits.numpy(), rtol=0, atol=limit(ref["logits"]), err_msg="inspect logits")
        for k, maps in weights.items():
            for l, w in enumerate(maps):
                np.testing.assert_allclose(ref["attention"][k][l], w.numpy(), rtol=0, atol=1e-4, err_msg=f"inspect {k} {l}")
        for part, states in hidden.items():
            for l, h in enumerate(states):
                np.testing.assert_allclose(ref["hidden"][part][l], h.numpy(), rtol=0, atol=limit(ref["hidden"][part][l]),
                                           err_msg=f"inspect hidden {part} {l}")

        # cache: the logits over the task's data, with its targets and loss mask
        cache = self.path("cache.h5")
        self.ok(["cache", ckpt, "--hooks", "logits", "--batches", "2", "--out", cache])
        with h5py.File(cache) as f:
            tokens, lengths = f["tokens"][()], f["lengths"][()]
            targets, mask = f["targets"][()], f["loss_mask"][()].astype(np.float64)
            cached = f["hooks/logits"][()]
            data = {"tokens": tokens, "lengths": lengths} if decoder else {
                "src": f["src"][()], "src_lengths": f["src_lengths"][()], "tgt": tokens, "tgt_lengths": lengths}
        torch_logits = self.forward(module, arch, data)
        valid = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
        np.testing.assert_allclose(cached[valid], torch_logits[valid], rtol=0, atol=limit(torch_logits[valid]),
                                   err_msg="cache logits")
        loss = cross_entropy(torch_logits, targets, mask)

        # eval and ablate: the loss of the same data (stream 2, the run's seed)
        r = self.ok(["eval", ckpt, "--batches", "2"])
        printed = float(re.search(r"loss (\S+)", r.stdout).group(1))
        self.assertAlmostEqual(printed, loss, delta=1e-4 * max(1.0, loss) + 5e-5, msg=r.stdout)
        ablation = self.path("ablate.h5")
        self.ok(["ablate", ckpt, "--batches", "2", "--out", ablation])
        with h5py.File(ablation) as f:
            self.assertAlmostEqual(float(f.attrs["baseline_loss"]), loss, delta=1e-4 * max(1.0, loss))

        if not decoder:
            return  # patching and the lens take decoder models
        clean = np.array([[int(t) for t in clean_text.split()]])
        corrupt = np.array([[int(t) for t in corrupt_text.split()]])
        T = clean.shape[1]
        lens_t = {"lengths": np.array([T])}
        clean_logits = self.forward(module, arch, dict(lens_t, tokens=clean))[0, -1]
        corrupt_logits = self.forward(module, arch, dict(lens_t, tokens=corrupt))[0, -1]

        # patch: the unpatched metrics, and the whole last stream restores the clean run
        patch = self.path("patch.h5")
        self.ok(["patch", ckpt, "--clean", clean_text, "--corrupt", corrupt_text, "--answers", "9:8", "--hooks",
                 "q,resid_post", "--out", patch])
        with h5py.File(patch) as f:
            for attr, logits in (("clean_metric", clean_logits), ("corrupt_metric", corrupt_logits)):
                self.assertAlmostEqual(float(f.attrs[attr]), float(logits[9] - logits[8]), delta=limit(logits), msg=attr)
            whole = f["grid/resid_post/values"][()]
            self.assertAlmostEqual(float(whole[-1]), 1.0, delta=1e-3, msg="the last block's output patched whole")
            q_cell = float(f["grid/q/values"][1, 0])

        # path-patch: every sender into head 1.0's q = patching that q itself
        r = self.ok(["path-patch", ckpt, "--clean", clean_text, "--corrupt", corrupt_text, "--answers", "9:8",
                     "--sender", "all", "--receiver", "1.0:q"])
        patched = float(re.search(r"patched norm_logit_diff (\S+)", r.stdout).group(1))
        self.assertAlmostEqual(patched, q_cell, delta=2e-4 * max(1.0, abs(q_cell)), msg=r.stdout)

        # lens: the last stream is the model; the attribution sums to the target logit
        lens = self.path("lens.h5")
        self.ok(["lens", ckpt, "--tokens", clean_text, "--out", lens])
        with h5py.File(lens) as f:
            last = f["lens/logits"][()][-1, 0]
            model_logits = self.forward(module, arch, dict(lens_t, tokens=clean))[0]
            np.testing.assert_allclose(last, model_logits, rtol=0, atol=limit(model_logits), err_msg="lens last stream")
            if norm == "pre" or norm == "none":
                self.assertEqual(int(f.attrs["attribution"]), 1)
                parts = f["dla/layer"][()].sum(axis=0) + f["dla/norm_bias"][()]
                target = f["dla/target_logit"][()]
                np.testing.assert_allclose(parts, target, rtol=0, atol=limit(target), err_msg="direct logit attribution")


if __name__ == "__main__":
    cc.setup_from_argv()
    if len(sys.argv) < 2:
        sys.exit("usage: test_analysis_matrix.py ATTNLAB REPO_ROOT POSITIONAL")
    POSITIONAL = sys.argv.pop(1)
    import unittest
    unittest.main(verbosity=2)
