"""The Python module `attnlab` (python/): load, run with a cache, run with
hooks, gradients at hook points, text models, encoder-decoders, and every bad
input class as a Python exception carrying the CLI's message, never a crash.
The module's numbers are the CLI's: logits and hook points equal `attnlab
inspect`'s on the same tokens, bit for bit.

    PYTHONPATH=build/python /usr/bin/python3 tests/python/test_module.py ATTNLAB_BINARY REPO_ROOT
    PYTHONPATH=build/python ATTNLAB_BINARY=build/attnlab /usr/bin/python3 -m pytest tests/python   (the same tests)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np

import attnlab

ATTNLAB = os.path.abspath(os.environ.get("ATTNLAB_BINARY", "build/attnlab"))
REPO_ROOT = os.path.abspath(os.environ.get("ATTNLAB_REPO_ROOT", os.path.join(os.path.dirname(__file__), "..", "..")))
ROOT = None  # trained runs, once per process

TINY = ["model.width=16", "model.heads=2", "model.layers=2", "model.ffn=32", "train.steps=30", "train.batch=8",
        "train.log_every=10", "train.eval_every=30", "train.checkpoint_every=30", "train.eval_batches=1"]


def attnlab_cli(args, cwd):
    r = subprocess.run([ATTNLAB] + args, cwd=cwd, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert r.returncode == 0, f"attnlab {' '.join(args)}: {r.stderr}"
    return r


def trained(name, overrides):
    """A tiny run trained once per process: its folder."""
    global ROOT
    if ROOT is None:
        ROOT = tempfile.mkdtemp(prefix="attnlab_python_")
    run = os.path.join(ROOT, name)
    if not os.path.isdir(run):
        attnlab_cli(["train"] + TINY + overrides + [f"run.out_dir={ROOT}", f"run.name={name}"], REPO_ROOT)
    return run


def tearDownModule():
    if ROOT:
        shutil.rmtree(ROOT, ignore_errors=True)


def decoder():
    return trained("decoder", ["task.name=induction", "task.vocab=24"])


SEQ = [3, 9, 4, 12, 5, 3, 9, 4, 12]


class Loading(unittest.TestCase):
    def test_config_params_and_points(self):
        m = attnlab.load(decoder())
        self.assertEqual(m.step, 30)
        self.assertEqual(m.config["task"]["name"], "induction")
        self.assertEqual(m.config["model"]["layers"], 2)
        with h5py.File(m.path) as f:
            names = []
            f["params"].visit(lambda n: names.append(n) if isinstance(f["params"][n], h5py.Dataset) else None)
            stored = {n.replace("/", "."): f["params"][n][()] for n in names}
        params = m.params
        self.assertEqual(sorted(params), sorted(stored))
        for name, value in params.items():
            np.testing.assert_array_equal(value, stored[name], name)
        self.assertEqual(m.hook_points["blocks.0.attn.pattern"], ["batch", "head", "query_pos", "key_pos"])
        self.assertEqual(m.match("blocks.*.attn.pattern"), ["blocks.0.attn.pattern", "blocks.1.attn.pattern"])

    def test_params_are_the_models_own_storage(self):
        m = attnlab.load(decoder())
        before = m.run(SEQ)
        w = m.params["head.weight"]
        saved = w.copy()
        w[...] = 0  # in place: the model sees it, every position's logits are then the head's bias (or 0)
        zeroed = m.run(SEQ)
        np.testing.assert_array_equal(zeroed, np.broadcast_to(zeroed[:, :1], zeroed.shape))
        w[...] = saved
        np.testing.assert_array_equal(m.run(SEQ), before)


class Running(unittest.TestCase):
    def test_cache_equals_inspect(self):
        run = decoder()
        m = attnlab.load(run)
        logits, cache = m.run_with_cache(SEQ, names="blocks.*.attn.pattern,blocks.1.attn.z")
        self.assertEqual(sorted(cache), ["blocks.0.attn.pattern", "blocks.1.attn.pattern", "blocks.1.attn.z"])
        out = os.path.join(ROOT, "inspect.h5")
        attnlab_cli(["inspect", run, "--tokens", " ".join(map(str, SEQ)), "--out", out,
                     "--hooks", "blocks.0.attn.pattern,blocks.1.attn.z"], ROOT)
        with h5py.File(out) as f:
            np.testing.assert_array_equal(logits, f["logits"][()])
            np.testing.assert_array_equal(cache["blocks.0.attn.pattern"], f["hooks/blocks.0.attn.pattern"][()])
            np.testing.assert_array_equal(cache["blocks.1.attn.z"], f["hooks/blocks.1.attn.z"][()])
        self.assertEqual(logits.dtype, np.float32)
        self.assertEqual(logits.shape, (1, len(SEQ), 24))

    def test_every_form_of_tokens(self):
        m = attnlab.load(decoder())
        one = m.run(SEQ)
        np.testing.assert_array_equal(m.run(np.array(SEQ)), one)
        np.testing.assert_array_equal(m.run(np.array([SEQ], dtype=np.int64)), one)
        # ragged: padded on the right, each row its own length; valid positions as run alone
        short = SEQ[:5]
        both = m.run([SEQ, short])
        np.testing.assert_allclose(both[0], one[0], rtol=0, atol=1e-6)  # another batch shape: another GEMM blocking
        np.testing.assert_allclose(both[1, :5], m.run(short)[0], rtol=0, atol=1e-6)

    def test_hooks_observe_and_replace(self):
        m = attnlab.load(decoder())
        clean = m.run(SEQ)
        seen = []
        self.assertTrue(np.array_equal(m.run_with_hooks(SEQ, {"blocks.*.attn.z": lambda z, name: seen.append(name)}), clean))
        self.assertEqual(seen, ["blocks.0.attn.z", "blocks.1.attn.z"])
        same = m.run_with_hooks(SEQ, {"blocks.1.attn.z": lambda z, name: z.copy()})
        np.testing.assert_array_equal(same, clean)
        zeroed, cache = m.run_with_hooks(SEQ, {"blocks.1.attn.z": lambda z, name: np.zeros_like(z)}, names="blocks.1.attn.z")
        self.assertFalse(np.array_equal(zeroed, clean))
        self.assertEqual(float(np.abs(cache["blocks.1.attn.z"]).max()), 0.0)  # the cache holds what the forward went on with

    def test_grad_matches_finite_differences(self):
        m = attnlab.load(decoder())
        rng = np.random.default_rng(0)
        logits = m.run(SEQ)
        w = rng.standard_normal(logits.shape).astype(np.float32)
        value, grads = m.grad(SEQ, w, names="blocks.0.resid_post,embed")
        self.assertAlmostEqual(value, float(np.sum(logits.astype(np.float64) * w)), delta=1e-3 * max(1.0, abs(value)))
        self.assertEqual(sorted(grads), ["blocks.0.resid_post", "embed"])
        for point in ("embed", "blocks.0.resid_post"):
            g = grads[point]
            direction = rng.standard_normal(g.shape).astype(np.float32)
            eps = 1e-2

            def shifted(sign):
                out = m.run_with_hooks(SEQ, {point: lambda x, name: x + sign * eps * direction})
                return float(np.sum(out.astype(np.float64) * w))
            numeric = (shifted(1) - shifted(-1)) / (2 * eps)
            analytic = float(np.sum(g.astype(np.float64) * direction))
            self.assertAlmostEqual(numeric, analytic, delta=2e-2 * max(1.0, abs(analytic)), msg=point)
        # a metric function: log p(answer) at the last position, with its gradient
        def log_prob(out):
            z = out[0, -1].astype(np.float64)
            p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
            seed = np.zeros_like(out)
            seed[0, -1] = -p
            seed[0, -1, 5] += 1
            return float(np.log(p[5])), seed
        value2, grads2 = m.grad(SEQ, log_prob, names="embed")
        self.assertLess(value2, 0)
        self.assertEqual(grads2["embed"].shape, grads["embed"].shape)

    def test_text_model(self):
        run = trained("text", ["task.name=text", f"task.path={os.path.join(REPO_ROOT, 'configs', 'text', 'stories.txt')}",
                               "task.max_len=16"])
        m = attnlab.load(run)
        ids = m.to_tokens("Anna had a ")
        self.assertEqual(m.to_text(ids), "Anna had a ")
        np.testing.assert_array_equal(m.run("Anna had a "), m.run(ids))

    def test_encoder_decoder(self):
        run = trained("translate", ["task.name=translate", "model.kind=encoder-decoder"])
        m = attnlab.load(run)
        logits, cache = m.run_with_cache([2, 5], names="decoder.0.cross_attn.pattern", src=[4, 5, 6])
        self.assertEqual(logits.shape[:2], (1, 2))
        self.assertEqual(cache["decoder.0.cross_attn.pattern"].shape[-1], 3)
        with self.assertRaisesRegex(ValueError, "needs the source tokens"):
            m.run([2, 5])


class Commands(unittest.TestCase):
    """attnlab.train, patch, ablate, lens: the CLI's runs and files."""

    def test_train_from_a_dict_and_overrides(self):
        out = os.path.join(ROOT, "trained_from_python")
        run = attnlab.train({"task": {"name": "copy"}, "model": {"width": 16, "heads": 2, "layers": 1, "ffn": 32},
                             "train.steps": 20, "train.eval_every": 10}, overrides={"run.out_dir": out},
                            train__batch=8, quiet=True)
        self.assertEqual(run, os.path.join(out, "default"))
        with open(os.path.join(run, "config.toml")) as f:
            text = f.read()
        self.assertIn('name = "copy"', text)
        self.assertIn("batch = 8", text)
        self.assertEqual(attnlab.load(run).step, 20)
        with self.assertRaisesRegex(ValueError, "unknown key model.hedas"):
            attnlab.train(overrides={"model.hedas": 2, "run.out_dir": out}, quiet=True)
        with self.assertRaisesRegex(ValueError, "model.heads"):
            attnlab.train(model__heads=0, run__out_dir=out, quiet=True)
        with self.assertRaises(FileNotFoundError):
            attnlab.train(os.path.join(ROOT, "no_such.toml"))

    def test_ctrl_c_checkpoints_and_raises(self):
        import signal
        import threading
        out = os.path.join(ROOT, "interrupted")
        timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with self.assertRaises(KeyboardInterrupt) as raised:
                attnlab.train(overrides={"run.out_dir": out, "train.steps": 200000, "train.checkpoint_every": 100000}, quiet=True)
        finally:
            timer.cancel()
        self.assertIn("interrupted at step", str(raised.exception))
        run = os.path.join(out, "default")
        step = attnlab.load(run).step
        self.assertGreater(step, 0)
        self.assertIn(f"resume with `attnlab train --resume {run}`", str(raised.exception))

    def test_patch_ablate_lens(self):
        run = decoder()
        m = attnlab.load(run)
        clean, corrupt = [3, 9, 4, 12, 5, 3, 9, 4], [3, 8, 4, 12, 5, 3, 8, 4]
        grid = attnlab.patch(run, clean=clean, corrupt=corrupt, answers="9:8", hooks=["z", "resid_pre"])
        self.assertEqual(grid["attrs"]["format"], "attnlab-patch")
        self.assertEqual(grid["grid"]["z"]["values"].shape, (2, 2))
        self.assertEqual(grid["grid"]["z_axes"], ("layer", "head"))
        table = attnlab.ablate(run, batches=2)
        self.assertEqual(table["self"]["zero_loss"].shape, (2, 2))
        lensed = attnlab.lens(run, tokens=SEQ)
        np.testing.assert_allclose(lensed["lens"]["logits"][-1], m.run(SEQ), rtol=0, atol=1e-6)
        with self.assertRaisesRegex(ValueError, "99"):
            attnlab.lens(run, tokens=[3, 99])


class BadInput(unittest.TestCase):
    """Each bad input: the right exception, the CLI's message, the interpreter alive
    (every kind of argument, every function: test_inputs.py)."""

    def test_bad_inputs(self):
        m = attnlab.load(decoder())
        broken = os.path.join(ROOT, "broken.h5")
        with open(broken, "w") as f:
            f.write("not hdf5")
        cases = [
            (lambda: attnlab.load(os.path.join(ROOT, "missing.h5")), FileNotFoundError, "no such file"),
            (lambda: attnlab.load(ROOT), FileNotFoundError, "without checkpoints"),
            (lambda: attnlab.load(broken), ValueError, "broken.h5"),
            (lambda: attnlab.load(decoder(), device="tpu"), ValueError, "device"),
            (lambda: m.run_with_cache(SEQ, names="blocks.0.atn.z"), KeyError, "no hook point matches"),
            (lambda: m.run([3, 99]), ValueError, "token 99 is outside the vocabulary [0, 24)"),
            (lambda: m.run([3, -1]), ValueError, "outside the vocabulary"),
            (lambda: m.run(np.array([[3.0, 4.0]])), TypeError, "integer"),
            (lambda: m.run(np.array([[True, False]])), TypeError, "integer"),
            (lambda: m.run(np.array([[3, 2 ** 40]], np.int64)), ValueError, "token 1099511627776 is outside the vocabulary"),
            (lambda: m.run(np.array([[3, 2 ** 63]], np.uint64)), ValueError, "token 9223372036854775808 is outside the vocabulary"),
            (lambda: m.run(np.array([[3, -7]], np.int32)), ValueError, "token -7 is outside the vocabulary"),
            (lambda: m.run_with_hooks(SEQ, {"blocks.0.attn.z": lambda z, n: z * np.inf}), ValueError, "non-finite"),
            (lambda: m.grad(SEQ, np.full((1, len(SEQ), 24), np.nan, np.float32), names="embed"), ValueError, "non-finite"),
            (lambda: m.run([]), ValueError, "tokens"),
            (lambda: m.run([3] * 500), ValueError, "exceed the model's"),
            (lambda: m.run([SEQ], lengths=[3, 4]), ValueError, "2 lengths for 1 sequences"),
            (lambda: m.run([SEQ], lengths=[0]), ValueError, "lengths"),
            (lambda: m.run_with_hooks(SEQ, {"blocks.0.attn.z": lambda z, n: z[..., :1]}), ValueError, "must keep shape"),
            (lambda: m.run_with_hooks(SEQ, {"blocks.0.attn.z": lambda z, n: z.astype(np.float64)}), ValueError, "dtype float32"),
            (lambda: m.run_with_hooks(SEQ, {"blocks.0.attn.z": lambda z, n: z * np.nan}), ValueError, "non-finite"),
            (lambda: m.run_with_hooks(SEQ, {"blocks.0.attn.z": lambda z, n: "x"}), ValueError, "float32 or float64"),
            (lambda: m.run_with_hooks(SEQ, {"blocks.0.attn.z": 3}), TypeError, "not callable"),
            (lambda: m.run_with_hooks(SEQ, {"blocks.9.attn.z": lambda z, n: None}), KeyError, "no hook point matches"),
            (lambda: m.grad(SEQ, np.zeros((1, 2, 24), np.float32), names="embed"), ValueError, "logits' shape"),
            (lambda: m.grad(SEQ, lambda out: 1.0, names="embed"), TypeError, "must return"),
            (lambda: m.to_tokens("abc"), ValueError, "has no text"),
            (lambda: m.run(SEQ, src=[3, 4]), ValueError, "takes no source"),
        ]
        for call, kind, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(kind) as raised:
                    call()
                self.assertIn(message, str(raised.exception))
        # a forward whose tables cannot fit in memory: refused before it runs, naming the tokens and the size
        # (64 heads with rotary positions: one attention's pattern over 60000 positions is 0.9 TB)
        wide = attnlab.load(trained("rotary64", ["task.name=copy", "model.positional=rotary", "model.width=128", "model.heads=64",
                                                 "train.steps=1", "train.checkpoint_every=1", "train.eval_every=1"]))
        long = np.full((1, 60000), 3, np.int32)
        seed = np.zeros((1, 60000, wide.params["tok_emb.weight"].shape[0]), np.float32)
        for call in (lambda: wide.run_with_cache(long, names="blocks.0.attn.pattern"),
                     lambda: wide.grad(long, seed, names="blocks.1.attn.scores")):
            with self.assertRaisesRegex(ValueError, r"^tokens: the attention tables .*64 heads x 60000 x 60000 positions.* "
                                                    r"need [0-9.]+ GB, this machine has"):
                call()
        # an exception inside a hook function comes back as itself
        def boom(z, name):
            raise ZeroDivisionError("from the hook")
        with self.assertRaisesRegex(ZeroDivisionError, "from the hook"):
            m.run_with_hooks(SEQ, {"blocks.0.attn.z": boom})
        # and the model still works after all of that
        self.assertEqual(m.run(SEQ).shape, (1, len(SEQ), 24))


if __name__ == "__main__":
    ATTNLAB = os.path.abspath(sys.argv.pop(1))
    REPO_ROOT = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
