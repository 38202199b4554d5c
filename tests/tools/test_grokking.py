#!/usr/bin/python3
"""tools/grokking.py: the Fourier basis and the key frequencies of a synthetic
embedding, the restricted and excluded logits of synthetic logit tensors, and
the tool end to end on a tiny modular-addition run (its train figures against
torch_bridge and attnlab's own /eval_train, its test pairs the complement of
train_set.h5, the PNG), on a "*" run (no restricted loss) and on bad input
(exit 2, one line, nothing written).

    /usr/bin/python3 tests/tools/test_grokking.py ATTNLAB_BINARY REPO_ROOT
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import cli_common as cc  # noqa: E402

grokking = torch_bridge = None  # tools/, imported once REPO_ROOT is known
P = 23
TRAIN_SIZE = 160
# A tiny modular run: 300 full-batch steps, a checkpoint and an evaluation every 100 (under a second).
MODULAR = {
    "task.name": "modular", "task.modulus": str(P), "task.vocab": str(P + 3), "task.train_size": str(TRAIN_SIZE),
    "train.batch": "all", "model.layers": "1", "model.norm": "none", "model.activation": "relu",
    "model.width": "32", "model.heads": "4", "model.ffn": "64", "optim.weight_decay": "1.0",
    "train.steps": "300", "train.checkpoint_every": "100", "train.keep_checkpoints": "0", "train.eval_every": "100",
}


def setUpModule():
    global grokking, torch_bridge
    sys.path.insert(0, os.path.join(cc.REPO_ROOT, "tools"))
    import grokking as g
    import torch_bridge as tb
    grokking, torch_bridge = g, tb


def tool(args, cwd):
    """Runs tools/grokking.py: CompletedProcess with text stdout/stderr."""
    env = dict(cc.env(), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(["/usr/bin/python3", os.path.join(cc.REPO_ROOT, "tools", "grokking.py")] + list(args),
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def train(folder, config):
    """Trains `config` (key: value overrides) into folder/runs/default -> the run folder."""
    out = os.path.join(folder, "runs")
    r = cc.attnlab(["train"] + [f"{k}={v}" for k, v in config.items()] + [f"run.out_dir={out}"], folder, timeout=120)
    assert r.returncode == 0, r.stderr
    return os.path.join(out, "default")


class Fourier(unittest.TestCase):
    def test_basis_is_orthonormal(self):
        for p in (23, 10, 2):
            basis, labels = grokking.fourier_basis(p)
            self.assertEqual(basis.shape, (p, p))
            np.testing.assert_allclose(basis @ basis.T, np.eye(p), atol=1e-12, err_msg=f"p = {p}")
            self.assertEqual(len(labels), p)
            self.assertEqual(max(k for k, _ in labels), p // 2)
        np.testing.assert_allclose(grokking.fourier_basis(10)[0][-1], [(-1) ** x / math.sqrt(10) for x in range(10)])

    def test_key_frequencies_of_a_synthetic_embedding(self):
        """E = cos/sin of k = 3 (stronger) and 7 with random coefficient vectors, a constant and a little noise."""
        rng = np.random.default_rng(0)
        x = np.arange(P)[:, None]
        width = 16
        E = np.zeros((P, width))
        for k, scale in ((3, 2.0), (7, 1.0)):
            E += scale * (np.cos(2 * np.pi * k * x / P) * rng.normal(size=width)
                          + np.sin(2 * np.pi * k * x / P) * rng.normal(size=width))
        E += 5.0 * rng.normal(size=width) + 0.01 * rng.normal(size=(P, width))
        norms, constant = grokking.frequency_norms(E)
        self.assertEqual(len(norms), 11)
        self.assertEqual(grokking.key_frequencies(norms), [3, 7])
        self.assertEqual(grokking.key_frequencies(norms, top=1), [3])
        self.assertEqual(grokking.key_frequencies(norms, top=4)[:2], [3, 7])
        # the constant does not count, and the norms carry the energy: |E|^2 = constant^2 + sum norms^2
        self.assertGreater(constant, norms.max())
        self.assertAlmostEqual(constant ** 2 + float(np.sum(norms ** 2)), float(np.sum(E ** 2)), places=8)
        # a pure cos_3 row direction v: norm_3 = |v| * |cos_3| = |v| sqrt(p / 2)
        v = rng.normal(size=width)
        norms, _ = grokking.frequency_norms(np.cos(2 * np.pi * 3 * x / P) * v)
        self.assertAlmostEqual(norms[2], np.linalg.norm(v) * math.sqrt(P / 2), places=10)
        self.assertEqual(grokking.key_frequencies(norms), [3])
        # a flat spectrum has no key frequency
        self.assertEqual(grokking.key_frequencies(np.ones(11)), [])


class Restricted(unittest.TestCase):
    @staticmethod
    def grid(p):
        a, b, c = np.meshgrid(np.arange(p), np.arange(p), np.arange(p), indexing="ij")
        return a, b, c

    def test_key_terms_pass_and_are_excluded(self):
        for p, keys in ((P, [3, 7]), (10, [2, 5])):  # p = 10: k = 5 = p/2 has a cosine only
            a, b, c = self.grid(p)
            w = {k: 2 * np.pi * k / p for k in keys}
            L = sum(s * np.cos(w[k] * (a + b - c)) for k, s in zip(keys, (4.0, 2.5)))
            L = L + 0.7 * np.sin(w[keys[1]] * (a + b - c))
            offset = np.random.default_rng(1).normal(size=p)[None, None, :]  # a per-output constant
            restricted, excluded = grokking.restricted_and_excluded(L + offset, p, keys)
            np.testing.assert_allclose(restricted, L + offset, atol=1e-9, err_msg=f"p = {p}")
            np.testing.assert_allclose(excluded, np.broadcast_to(offset, L.shape), atol=1e-9, err_msg=f"p = {p}")
            # the other frequencies are not kept: with only the first key, the second's terms are excluded
            kept = grokking.project_key_frequencies(L, p, keys[:1])
            np.testing.assert_allclose(kept, 4.0 * np.cos(w[keys[0]] * (a + b - c)), atol=1e-9)
            # a term in a - b (not a + b) is removed by the restriction
            other = np.cos(w[keys[0]] * (a - b - c))
            self.assertLess(np.abs(grokking.project_key_frequencies(other, p, keys)).max(), 1e-9)

    def test_noise_is_mostly_removed(self):
        L = np.random.default_rng(2).normal(size=(P, P, P))
        restricted, excluded = grokking.restricted_and_excluded(L, P, [3, 7])
        centred = L - L.mean(axis=(0, 1), keepdims=True)
        kept = restricted - L.mean(axis=(0, 1), keepdims=True)
        # 4 of the p^2 - 1 non-constant directions: about 4 / 528 of the energy
        self.assertLess(np.sum(kept ** 2) / np.sum(centred ** 2), 0.03)
        np.testing.assert_allclose(restricted + excluded - L, np.broadcast_to(L.mean(axis=(0, 1), keepdims=True), L.shape),
                                   atol=1e-12)


class EndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="attnlab_grokking_")
        cls.addClassCleanup(shutil.rmtree, cls.folder, ignore_errors=True)  # also when training fails here
        cls.run_dir = train(cls.folder, MODULAR)
        with h5py.File(os.path.join(cls.run_dir, "train_set.h5"), "r") as f:
            cls.train_tokens = f["tokens"][()]
        with h5py.File(os.path.join(cls.run_dir, "metrics.h5"), "r") as f:
            cls.eval_train = {int(s): (float(l), float(a)) for s, l, a in
                              zip(f["eval_train/step"][()], f["eval_train/loss"][()], f["eval_train/token_acc"][()])}

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="attnlab_grokking_out_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    @staticmethod
    def independent(checkpoint, tokens):
        """(loss, acc) over the p numbers, and (loss, acc) over the whole vocabulary, of rows a b = c."""
        import torch
        module, arch, _, _ = torch_bridge.build_module(checkpoint, torch.float64)
        rows = {"tokens": tokens[:, :3], "lengths": np.full(len(tokens), 3)}
        logits = torch_bridge.run(module, arch, rows)[0][:, 2, :]  # (n, V) at "="
        target = torch.as_tensor(tokens[:, 3].astype(np.int64))
        numbers = logits[:, 3:3 + P]
        F = torch.nn.functional
        return ((F.cross_entropy(numbers, target - 3).item(), (numbers.argmax(1) == target - 3).double().mean().item()),
                (F.cross_entropy(logits, target).item(), (logits.argmax(1) == target).double().mean().item()))

    def test_run_folder_all_checkpoints(self):
        out, png = os.path.join(self.tmp, "x.json"), os.path.join(self.tmp, "x.png")
        r = tool([self.run_dir, "--checkpoints", "all", "--out", out, "--plot", png], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            doc = json.load(f)
        self.assertEqual((doc["modulus"], doc["op"]), (P, "+"))
        self.assertEqual(doc["train_pairs"], TRAIN_SIZE)
        self.assertEqual(doc["test_pairs"], P * P - TRAIN_SIZE)
        self.assertEqual(doc["frequencies"], list(range(1, 12)))
        results = doc["checkpoints"]
        self.assertEqual([c["step"] for c in results], [100, 200, 300])
        # the test pairs: every (a, b) of the grid but the training pairs
        a, b = grokking.all_pairs(P, "+")
        is_train = grokking.train_mask(P, a, b, self.train_tokens[:, 0] - 3, self.train_tokens[:, 1] - 3)
        self.assertEqual(int(is_train.sum()), TRAIN_SIZE)
        trained = {(int(x), int(y)) for x, y in self.train_tokens[:, :2] - 3}
        tested = {(int(x), int(y)) for x, y in zip(a[~is_train], b[~is_train])}
        self.assertEqual(len(tested), P * P - TRAIN_SIZE)
        self.assertEqual(trained & tested, set())
        self.assertEqual(len(trained | tested), P * P)
        test_rows = np.stack([a[~is_train] + 3, b[~is_train] + 3, np.ones(len(tested), dtype=np.int64),
                              (a[~is_train] + b[~is_train]) % P + 3], axis=1)
        for c in results:
            (loss, acc), (vocab_loss, vocab_acc) = self.independent(c["path"], self.train_tokens)
            self.assertAlmostEqual(c["train_acc"], acc, places=12)
            self.assertAlmostEqual(c["train_loss"], loss, places=9)
            # ... and this reading of the checkpoint is attnlab's own: /eval_train over the whole vocabulary
            self.assertAlmostEqual(vocab_acc, self.eval_train[c["step"]][1], places=9)
            self.assertAlmostEqual(vocab_loss, self.eval_train[c["step"]][0], places=4)
            (loss, acc), _ = self.independent(c["path"], test_rows)
            self.assertAlmostEqual(c["test_acc"], acc, places=12)
            self.assertAlmostEqual(c["test_loss"], loss, places=9)
            self.assertEqual(len(c["frequency_norms"]), 11)
            self.assertTrue(math.isfinite(c["restricted_loss"]) and math.isfinite(c["excluded_loss"]))
            self.assertEqual(c["loss_key_frequencies"], results[-1]["key_frequencies"])
        self.assertGreater(results[-1]["train_acc"], results[0]["train_acc"])  # it learnt: the figures move
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(png), 10000)
        table = [line.split() for line in r.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
        self.assertEqual([int(row[0]) for row in table], [100, 200, 300])
        self.assertEqual(sorted(os.listdir(self.tmp)), ["x.json", "x.png"])  # no temporary file left

    def test_checkpoint_file_finds_its_train_set(self):
        checkpoint = os.path.join(self.run_dir, "checkpoints", "step_0000200.h5")
        out = os.path.join(self.tmp, "one.json")
        r = tool([checkpoint, "--out", out, "--key-frequencies", "2"], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            doc = json.load(f)
        self.assertEqual(doc["train_set"], os.path.join(self.run_dir, "train_set.h5"))
        self.assertEqual(doc["train_pairs"], TRAIN_SIZE)
        (c,) = doc["checkpoints"]
        self.assertEqual(c["step"], 200)
        self.assertEqual(len(c["key_frequencies"]), 2)
        norms = np.asarray(c["frequency_norms"])
        self.assertEqual(c["key_frequencies"], [int(k) + 1 for k in np.argsort(-norms)[:2]])

    def test_restricted_loss_by_fourier_transform(self):
        """--keys each: every checkpoint's restricted and excluded loss with its own two strongest frequencies,
        recomputed here by a 2-D DFT over (a, b): a function of a+b at frequency k lives on the
        coefficients (k, k) and (-k, -k), the mean over the inputs on (0, 0)."""
        import torch
        out = os.path.join(self.tmp, "each.json")
        r = tool([self.run_dir, "--checkpoints", "all", "--keys", "each", "--key-frequencies", "2", "--out", out], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("each checkpoint's own key frequencies", r.stdout)
        with open(out) as f:
            results = json.load(f)["checkpoints"]
        a, b = np.meshgrid(np.arange(P), np.arange(P), indexing="ij")
        target = ((a + b) % P).ravel()
        trained = np.zeros((P, P), dtype=bool)
        trained[self.train_tokens[:, 0] - 3, self.train_tokens[:, 1] - 3] = True
        for c in results:
            keys = c["key_frequencies"]
            self.assertEqual(keys, [int(k) + 1 for k in np.argsort(-np.asarray(c["frequency_norms"]))[:2]])
            self.assertEqual(c["loss_key_frequencies"], keys)
            module, arch, _, _ = torch_bridge.build_module(c["path"], torch.float64)
            tokens = np.stack([a.ravel() + 3, b.ravel() + 3, np.ones(P * P, dtype=np.int64)], axis=1)
            L = torch_bridge.run(module, arch, {"tokens": tokens, "lengths": np.full(P * P, 3)})[0][:, 2, 3:3 + P]
            L = L.numpy().reshape(P, P, P)  # [a, b, c]
            spectrum = np.fft.fft2(L, axes=(0, 1))
            on_keys = np.zeros((P, P, 1))
            for k in keys:
                on_keys[k, k] = on_keys[P - k, P - k] = 1
            mean_only = np.zeros((P, P, 1))
            mean_only[0, 0] = 1
            restricted = np.real(np.fft.ifft2(spectrum * (on_keys + mean_only), axes=(0, 1))).reshape(P * P, P)
            excluded = np.real(np.fft.ifft2(spectrum * (1 - on_keys), axes=(0, 1))).reshape(P * P, P)
            F = torch.nn.functional
            self.assertAlmostEqual(c["restricted_loss"], F.cross_entropy(torch.tensor(restricted), torch.tensor(target)).item(),
                                   places=9)
            rows = trained.ravel()
            self.assertAlmostEqual(c["excluded_loss"], F.cross_entropy(torch.tensor(excluded[rows]),
                                                                       torch.tensor(target[rows])).item(), places=9)

    def test_other_op_has_no_restricted_loss(self):
        run = train(self.tmp, dict(MODULAR, **{"task.op": "*", "train.steps": "100"}))
        out = os.path.join(self.tmp, "mul.json")
        r = tool([run, "--out", out], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('for op "+" only', r.stdout)
        with open(out) as f:
            (c,) = json.load(f)["checkpoints"]
        self.assertIsNone(c["restricted_loss"])
        self.assertIsNone(c["excluded_loss"])
        with h5py.File(os.path.join(run, "train_set.h5"), "r") as f:
            tokens = f["tokens"][()]
        (_, acc), _ = self.independent(c["path"], tokens)
        self.assertAlmostEqual(c["train_acc"], acc, places=12)

    def refused(self, args, *wants):
        r = tool(args, self.tmp)
        shown = f"grokking {' '.join(args)}\nexit {r.returncode}\nstdout {r.stdout!r}\nstderr {r.stderr!r}"
        self.assertEqual(r.returncode, 2, shown)
        self.assertEqual(r.stdout, "", shown)
        self.assertTrue(r.stderr.startswith("grokking: ") and r.stderr.count("\n") == 1, shown)
        for want in wants:
            self.assertIn(want, r.stderr, shown)

    def test_bad_input(self):
        out = os.path.join(self.tmp, "bad.json")
        missing = os.path.join(self.tmp, "nowhere")
        self.refused([missing, "--out", out], missing, "no such file")
        self.refused([self.tmp, "--out", out], "no checkpoints/")
        checkpoint = os.path.join(self.run_dir, "checkpoints", "step_0000300.h5")
        self.refused([checkpoint, "--checkpoints", "all"], "needs a run folder")
        self.refused([self.run_dir, "--key-frequencies", "0"], "--key-frequencies 0", "1 .. 11")
        self.refused([self.run_dir, "--key-frequencies", "12"], "--key-frequencies 12")
        self.refused([self.run_dir, "--checkpoints", "every"], "--checkpoints", "invalid choice")
        self.refused([self.run_dir, "--out", os.path.join(missing, "x.json")], "does not exist")
        self.refused([self.run_dir, "--out", checkpoint], "would replace an input")
        with open(os.path.join(self.tmp, "text.h5"), "w") as f:
            f.write("not hdf5\n")
        self.refused([os.path.join(self.tmp, "text.h5")], "not an HDF5 file")
        # a checkpoint of another task
        other = train(self.tmp, {"train.steps": "5", "model.width": "16", "model.heads": "2", "model.ffn": "32"})
        self.refused([other, "--out", out, "--plot", os.path.join(self.tmp, "bad.png")], "task.name is 'recall'",
                     "not 'modular'")
        # a training set that is not this checkpoint's: answers shifted by one
        fake = os.path.join(self.tmp, "fake")
        os.makedirs(os.path.join(fake, "checkpoints"))
        shutil.copy(checkpoint, os.path.join(fake, "checkpoints"))
        with h5py.File(os.path.join(fake, "train_set.h5"), "w") as f:
            tokens = self.train_tokens.copy()
            tokens[:, 3] = (tokens[:, 3] - 3 + 1) % P + 3
            f["tokens"] = tokens
            f["loss_mask"] = np.tile(np.array([0, 0, 0, 1], dtype=np.uint8), (len(tokens), 1))
        self.refused([fake, "--out", out], "train_set.h5", "not this checkpoint's training set")
        with h5py.File(os.path.join(fake, "train_set.h5"), "w") as f:  # its own rows, but not all of them
            f["tokens"] = self.train_tokens[:100]
            f["loss_mask"] = np.tile(np.array([0, 0, 0, 1], dtype=np.uint8), (100, 1))
        self.refused([fake, "--out", out], "holds 100 examples", "task.train_size 160")
        self.assertFalse(os.path.exists(out))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "bad.png")))


if __name__ == "__main__":
    cc.main()
