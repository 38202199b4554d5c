"""`attnlab heads` and train.head_scores as processes: the scores logged during
training (/head_scores of metrics.h5) are the command's on the same step's
checkpoint, bit for bit; --checkpoints all scores a run's checkpoints in step
order; a resumed run's /head_scores rows are the uninterrupted run's;
model.ablate_heads zeroes those heads' output and train.freeze keeps parameters
at their values; every bad
argument (an encoder-decoder, a bad --checkpoints, --rows 0, an --out that is
not the command's, train.head_scores on an encoder-decoder) exits 2 with one
line and writes nothing.

    /usr/bin/python3 tests/cli/test_heads.py ATTNLAB_BINARY REPO_ROOT
"""
import os
import shutil
import tempfile

import h5py
import numpy as np

import cli_common as cc

# induction, two attention-only layers: 60 steps, a checkpoint and head scores every 20
CONFIG = dict(cc.TINY, **{"task.name": "induction", "task.vocab": "24", "model.layers": "2", "model.ffn": "0",
                          "train.steps": "60", "train.eval_every": "20", "train.checkpoint_every": "20",
                          "train.keep_checkpoints": "0", "train.head_scores": "true"})
ENC_DEC = dict(cc.TINY, **{"task.name": "translate", "model.kind": "encoder-decoder"})
SCORES = ("previous_token", "duplicate_token", "induction", "copying")

Trained = cc.Trained


def tearDownModule():
    Trained.remove()


def run_dir():
    return os.path.dirname(os.path.dirname(Trained.checkpoint("induction", CONFIG)))


def logged(run):
    with cc.open_metrics(os.path.join(run, "metrics.h5")) as f:
        return {name: f["head_scores/" + name][()] for name in ("step", "repeat_loss") + SCORES}


class Heads(cc.TempDirTest):
    def test_training_logs_what_the_command_computes(self):
        run = run_dir()
        rows = logged(run)
        np.testing.assert_array_equal(rows["step"], [0, 20, 40, 60])  # step 0: the model at initialisation
        self.assertEqual(rows["induction"].shape, (4, 2, 2))
        for name in SCORES:  # shares of attention in [0, 1]; the copying score in [-1, 1]
            self.assertTrue(np.all((rows[name] >= (-1 if name == "copying" else 0)) & (rows[name] <= 1)), name)
        out = self.path("all.h5")
        r = self.run_ok(["heads", run, "--checkpoints", "all", "--out", out])
        self.assertEqual(r.stdout.count("repeat loss"), 3, r.stdout)
        with h5py.File(out) as f:
            self.assertEqual(f.attrs["format"], "attnlab-head-scores")
            self.assertEqual(f.attrs["rows"], 32)
            self.assertEqual(f.attrs["half"], 6)  # task.max_len 6: r r inputs of 11 positions
            np.testing.assert_array_equal(f["step"][()], [20, 40, 60])
            self.assertEqual([os.path.basename(p.decode() if isinstance(p, bytes) else p) for p in f["checkpoints"][()]],
                             ["step_0000020.h5", "step_0000040.h5", "step_0000060.h5"])
            for name in SCORES + ("repeat_loss",):  # the same batch, the same model: the same bits
                np.testing.assert_array_equal(f[name][()], rows[name][1:], name)

    def test_one_checkpoint(self):
        ckpt = Trained.checkpoint("induction", CONFIG)
        r = self.run_ok(["heads", ckpt])
        self.assertIn("prev-token", r.stdout)
        out = ckpt[:-3] + ".heads.h5"
        self.addCleanup(os.remove, out)
        rows = logged(run_dir())
        with h5py.File(out) as f:
            np.testing.assert_array_equal(f["step"][()], [60])
            for name in SCORES:
                np.testing.assert_array_equal(f[name][()][0], rows[name][-1], name)
            self.assertEqual(f["repeat_loss"][0], rows["repeat_loss"][-1])

    def test_copying_is_the_ov_circuits_eigenvalues(self):
        """Olsson et al.'s copying score, from numpy on the checkpoint's weights: the full
        vocab x vocab circuit W_E W_V,h^T W_O,h^T W_U^T, not the small one attnlab uses."""
        ckpt = Trained.checkpoint("induction", CONFIG)
        out = self.path("one.h5")
        self.run_ok(["heads", ckpt, "--out", out])
        with h5py.File(ckpt) as f, h5py.File(out) as g:
            p = {name: f["params/" + name][()].astype(np.float64) for name in f["params"]}
            got = g["copying"][0]
        heads, width = 2, p["tok_emb.weight"].shape[1]
        d_h = width // heads
        for layer in range(2):
            for head in range(heads):
                w_v = p[f"blocks.{layer}.attn.v_proj.weight"][head * d_h:(head + 1) * d_h]        # (d_h, D)
                w_o = p[f"blocks.{layer}.attn.out_proj.weight"][:, head * d_h:(head + 1) * d_h]  # (D, d_h)
                circuit = p["tok_emb.weight"] @ w_v.T @ w_o.T @ p["head.weight"].T               # (V, V)
                eigenvalues = np.linalg.eigvals(circuit)
                expected = eigenvalues.real.sum() / np.abs(eigenvalues).sum()
                self.assertAlmostEqual(got[layer, head], expected, delta=1e-5, msg=f"L{layer}.H{head}")  # float32 products

    def test_composition_scores_from_numpy(self):
        """Elhage et al.'s Q-, K- and V-composition of every earlier-to-later head pair,
        from numpy on the checkpoint's weights (row-vector convention, y = x W^T)."""
        ckpt = Trained.checkpoint("induction", CONFIG)
        out = self.path("composition.h5")
        r = self.run_ok(["heads", ckpt, "--out", out, "--circuits"])
        self.assertIn("strongest K-composition", r.stdout)
        with h5py.File(ckpt) as f, h5py.File(out) as g:
            p = {name: f["params/" + name][()].astype(np.float64) for name in f["params"]}
            got = {kind: g["composition/" + kind][0] for kind in "qkv"}
            tables = {kind: g["circuits/" + kind][()] for kind in ("qk", "ov")}
            self.assertEqual(g["circuits"].attrs["step"], 60)
        heads, width = 2, p["tok_emb.weight"].shape[1]
        d_h = width // heads

        def circuits(layer, head):
            rows = slice(head * d_h, (head + 1) * d_h)
            w = {name: p[f"blocks.{layer}.attn.{name}.weight"] for name in ("q_proj", "k_proj", "v_proj", "out_proj")}
            return w["v_proj"][rows].T @ w["out_proj"][:, rows].T, w["q_proj"][rows].T @ w["k_proj"][rows]  # OV, QK

        def score(a, b):
            return np.linalg.norm(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))
        n = 2 * heads
        for a in range(n):
            for b in range(n):
                if a // heads >= b // heads:
                    for kind in "qkv":
                        self.assertTrue(np.isnan(got[kind][a, b]))
                    continue
                ov_a, _ = circuits(a // heads, a % heads)
                ov_b, qk_b = circuits(b // heads, b % heads)
                self.assertAlmostEqual(got["q"][a, b], score(ov_a, qk_b), delta=1e-5)
                self.assertAlmostEqual(got["k"][a, b], score(ov_a, qk_b.T), delta=1e-5)
                self.assertAlmostEqual(got["v"][a, b], score(ov_a, ov_b), delta=1e-5)
        # --circuits: each head's token x token tables through the embedding and the unembedding
        embed, unembed = p["tok_emb.weight"], p["head.weight"]
        for a in range(n):
            ov, qk = circuits(a // heads, a % heads)
            for got_table, expected in ((tables["qk"][a], embed @ qk @ embed.T), (tables["ov"][a], embed @ ov @ unembed.T)):
                np.testing.assert_allclose(got_table, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())

    def test_resume_continues_the_rows(self):
        out = self.path("runs")
        whole = self.run_ok(["train"] + cc.overrides(CONFIG, **{"run.out_dir": out, "run.name": "whole"}))
        self.assertIn("repeat loss", whole.stderr + whole.stdout)
        self.run_ok(["train"] + cc.overrides(CONFIG, **{"run.out_dir": out, "run.name": "cut", "train.steps": "40"}))
        cut = os.path.join(out, "cut")
        with open(os.path.join(cut, "config.toml")) as f:
            text = f.read().replace("steps = 40", "steps = 60")
        with open(os.path.join(cut, "config.toml"), "w") as f:
            f.write(text)
        self.run_ok(["train", "--resume", cut])
        a, b = logged(os.path.join(out, "whole")), logged(cut)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], name)


class TrainingInterventions(cc.TempDirTest):
    """model.ablate_heads and train.freeze (Bietti et al. 2023's interventions during training)."""

    def test_frozen_parameters_keep_their_values_and_ablated_heads_output_zero(self):
        out = self.path("runs")
        self.run_ok(["train"] + cc.overrides(CONFIG, **{"run.out_dir": out, "train.freeze": '["blocks.0.*", "tok_emb.weight"]',
                                                        "model.ablate_heads": '["1.1"]'}))
        run = os.path.join(out, "default")
        with h5py.File(cc.checkpoint_path(run, 20)) as a, h5py.File(cc.checkpoint_path(run, 60)) as b:
            names = []
            a["params"].visit(lambda n: names.append(n) if isinstance(a["params"][n], h5py.Dataset) else None)
            for name in names:
                same = np.array_equal(a["params"][name][()], b["params"][name][()])
                frozen = name.startswith("blocks.0.") or name.startswith("blocks/0/") or name == "tok_emb.weight"
                self.assertEqual(same, frozen, name)
        inspect = self.path("i.h5")
        self.run_ok(["inspect", run, "--tokens", "3 4 5 6 3 4 5", "--out", inspect, "--hooks", "blocks.1.attn.z"])
        with h5py.File(inspect) as f:
            z = f["hooks/blocks.1.attn.z"][()]  # (B, T, H, d_h)
        self.assertEqual(float(np.abs(z[:, :, 1]).max()), 0.0)
        self.assertGreater(float(np.abs(z[:, :, 0]).max()), 0.0)


class Refused(cc.TempDirTest):
    def test_bad_arguments(self):
        ckpt = Trained.checkpoint("induction", CONFIG)
        enc_dec = Trained.checkpoint("enc_dec", ENC_DEC)
        cases = [
            (["heads", enc_dec], ["decoder model"]),
            (["heads", ckpt, "--checkpoints", "some"], ["--checkpoints", "some"]),
            (["heads", ckpt, "--rows", "0"], ["--rows", "[1, 65536]"]),
            (["heads", ckpt, "--out", ckpt], ["--out", "input of this command"]),
            (["heads", ckpt, "--out", os.path.join(os.path.dirname(os.path.dirname(ckpt)), "metrics.h5")],
             ["--out", "not a file of this command"]),
            (["heads", self.path("none")], ["none"]),
            (["heads"], ["exactly one CHECKPOINT"]),
            (["train"] + cc.overrides(ENC_DEC, **{"train.head_scores": "true"}), ["train.head_scores", "decoder"]),
            (["train"] + cc.overrides(CONFIG, **{"train.freeze": '["blocks.7.*"]'}), ["train.freeze", "blocks.7.*", "names no parameter"]),
            (["train"] + cc.overrides(CONFIG, **{"train.freeze": '["*"]'}), ["train.freeze", "every parameter"]),
            (["train"] + cc.overrides(CONFIG, **{"model.ablate_heads": '["2.0"]'}), ["model.ablate_heads", "outside the model"]),
            (["train"] + cc.overrides(CONFIG, **{"model.ablate_heads": '["0.0", "0.0"]'}), ["given twice"]),
        ]
        work = tempfile.mkdtemp(prefix="attnlab_heads_refused_")
        self.addCleanup(shutil.rmtree, work, ignore_errors=True)
        runs = tempfile.mkdtemp(prefix="attnlab_heads_runs_")
        self.addCleanup(shutil.rmtree, runs, ignore_errors=True)
        run = os.path.dirname(os.path.dirname(ckpt))
        before = {run: cc.tree_hashes(run)}
        for args, wants in cases:
            with self.subTest(args=" ".join(args)):
                cc.run_refused(self, args, work, runs, wants, before)

    def test_tables_larger_than_memory_are_estimated_first(self):
        # a 2^20-token vocabulary: the token circuits would need 44 TB; refused in one line before
        # anything is computed or written (it once ran into "out of memory", naming nothing)
        out = self.path("runs")
        self.run_ok(["train", "task.name=copy", "task.vocab=1048576", "model.width=8", "model.heads=1", "model.layers=1",
                     "model.ffn=0", "train.steps=1", "train.batch=2", "train.eval_batches=1", "train.checkpoint_every=1",
                     "train.eval_every=1", f"run.out_dir={out}"], timeout=120)
        ckpt = cc.checkpoint_path(os.path.join(out, "default"), 1)
        before = cc.tree_hashes(out)
        r = cc.attnlab(["heads", ckpt, "--circuits"], self.tmp, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        for want in ("--circuits", "1048576", "GB", "this machine has"):
            self.assertIn(want, lines[0])
        self.assertEqual(cc.tree_hashes(out), before, "nothing written")

        # inspect over 60000 positions of a rotary model of 4 layers x 8 heads: its scores and patterns need 0.9 TB
        self.run_ok(["train", "task.name=copy", "model.positional=rotary", "model.width=16", "model.heads=8", "model.layers=4",
                     "model.ffn=0", "train.steps=1", "train.batch=2", "train.eval_batches=1", "train.checkpoint_every=1",
                     f"run.out_dir={out}", "run.name=rotary"], timeout=120)
        ckpt = cc.checkpoint_path(os.path.join(out, "rotary"), 1)
        r = cc.attnlab(["inspect", ckpt, "--tokens", " ".join(["3"] * 60000), "--out", self.path("i.h5")], self.tmp, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        for want in ("--tokens", "60000 x 60000 positions", "GB", "this machine has"):
            self.assertIn(want, lines[0])
        self.assertFalse(os.path.exists(self.path("i.h5")))


if __name__ == "__main__":
    cc.main()
