"""`attnlab patch`, `path-patch`, `circuit`, `lens`, `cache`, `example` and `inspect --hooks`
as processes, on a tiny trained decoder: each writes its file (the layouts its
--help gives) and prints its table; the lens at the last stream is the model's
logits; circuit's exact edge into a head is path-patch's number; cache streams
every batch; every bad argument (unknown hook, prompts of
different lengths, out-of-range tokens, a sender downstream of its receiver, an
encoder-decoder, bad --pairs files) exits 2 with one line and writes nothing.

    /usr/bin/python3 tests/cli/test_interventions.py ATTNLAB_BINARY REPO_ROOT
"""
import os
import shutil
import tempfile

import h5py
import numpy as np

import cli_common as cc

CONFIG = dict(cc.TINY, **{"model.layers": "2", "train.checkpoint_every": "40"})
ENC_DEC = dict(CONFIG, **{"task.name": "translate", "model.kind": "encoder-decoder"})
CLEAN = "3 9 4 12 5 1 5 12 4"
CORRUPT = "3 8 4 11 5 1 5 12 4"
ANSWERS = ["--answers", "9:8"]


Trained = cc.Trained  # the tiny runs, trained once for the whole file


def tearDownModule():
    Trained.remove()


def decoder():
    return Trained.checkpoint("decoder", CONFIG)


class Interventions(cc.TempDirTest):
    def test_patch_writes_the_grid_and_the_png(self):
        out = self.path("p.h5")
        r = self.run_ok(["patch", decoder(), "--clean", CLEAN, "--corrupt", CORRUPT, *ANSWERS, "--hooks", "z,v,resid_pre",
                         "--per-position", "--out", out, "--png", self.path("png")])
        self.assertIn("top 10 of", r.stdout)
        with h5py.File(out) as f:
            self.assertEqual(f.attrs["format"], "attnlab-patch")
            self.assertEqual(f.attrs["direction"], "denoising")
            self.assertEqual(f["grid/z/values"].shape, (2, 2, 9))
            self.assertEqual(f["grid/z"].attrs["axes"], "layer,head,position")
            self.assertEqual(f["grid/resid_pre/values"].shape, (2, 9))
            # position 8 holds the same token in both prompts: its embedding changes nothing
            self.assertEqual(f["grid/resid_pre/values"][0, 8], 0.0)
            np.testing.assert_array_equal(f["clean"][()], [[int(t) for t in CLEAN.split()]])
        self.assertEqual(sorted(os.listdir(self.path("png"))), ["patch_resid_pre.png", "patch_v.png", "patch_z.png"])
        # the whole stream at every position restores the clean answer exactly
        whole = self.path("whole.h5")
        self.run_ok(["patch", decoder(), "--clean", CLEAN, "--corrupt", CORRUPT, *ANSWERS, "--hooks", "resid_pre,resid_post",
                     "--out", whole])
        with h5py.File(whole) as f:
            for hook in ("resid_pre", "resid_post"):
                np.testing.assert_array_equal(f[f"grid/{hook}/values"][()], [1.0, 1.0])

    def test_patch_pairs_file_and_noising(self):
        pairs = self.path("pairs.h5")
        with h5py.File(pairs, "w") as f:
            f["clean"] = np.array([[int(t) for t in CLEAN.split()]] * 2)
            f["corrupt"] = np.array([[int(t) for t in CORRUPT.split()]] * 2)
            f["positions"] = np.array([[8], [8]])
            f["clean_answers"] = np.array([[9], [9]])
            f["corrupt_answers"] = np.array([[8], [8]])
        r = self.run_ok(["patch", decoder(), "--pairs", pairs, "--noising", "--metric", "logit_diff", "--out", self.path("n.h5")])
        self.assertIn("2 pair(s) of 9 tokens, noising, cells in logit_diff", r.stdout)

    def test_path_patch_prints_the_edge(self):
        r = self.run_ok(["path-patch", decoder(), "--clean", CLEAN, "--corrupt", CORRUPT, *ANSWERS, "--sender", "0.0,0.1",
                         "--receiver", "1.0:k"])
        self.assertRegex(r.stdout, r"0\.0,0\.1 -> 1\.0:k: unpatched logit_diff clean -?[0-9.]+, corrupted -?[0-9.]+; patched norm_logit_diff -?[0-9.]+")

    def test_circuit_writes_every_edge_and_compares(self):
        out = self.path("c.h5")
        r = self.run_ok(["circuit", decoder(), "--clean", CLEAN, "--corrupt", CORRUPT, *ANSWERS, "--method", "eap-ig",
                         "--ig-steps", "3", "--compare", "exact", "--recall-k", "5", "--out", out])
        self.assertRegex(r.stdout, r"eap-ig, 46 edges in [0-9.]+ s")
        self.assertRegex(r.stdout, r"against exact \([0-9.]+ s\): Spearman -?[0-9.]+, top-5 recall [0-9.]+")
        with h5py.File(out) as f:
            self.assertEqual(f.attrs["format"], "attnlab-circuit")
            self.assertEqual(f.attrs["method"], "eap-ig")
            self.assertEqual(f.attrs["ig_steps"], 3)
            edges = {(s.decode(), r.decode()): (a, b) for s, r, a, b in zip(f["edges/sender"][()], f["edges/receiver"][()],
                                                                                f["edges/score"][()], f["edges/exact"][()])}
            self.assertEqual(len(edges), 46)
            self.assertEqual(f["edges"].attrs["top_k"], 5)
        # the exact edge 0.0 -> 1.0:k is path-patch's number
        r = self.run_ok(["path-patch", decoder(), "--clean", CLEAN, "--corrupt", CORRUPT, *ANSWERS, "--sender", "0.0",
                         "--receiver", "1.0:k"])
        patched = float(r.stdout.rsplit("patched norm_logit_diff", 1)[1])
        self.assertAlmostEqual(edges[("0.0", "1.0:k")][1], patched, places=4)

    def test_decompose_adds_up_to_the_score(self):
        out = self.path("parts.h5")
        r = self.run_ok(["decompose", decoder(), "--tokens", CLEAN, "--head", "1.0", "--query", "8", "--key", "3", "--out", out])
        self.assertRegex(r.stdout, r"head 1\.0, query 8 \(4\), key 3 \(12\): score -?[0-9.]+ = parts -?[0-9.]+ \+ modifier -?0\.0000")
        with h5py.File(out) as f:
            self.assertEqual(f.attrs["format"], "attnlab-score-parts")
            names = [n.decode() for n in f["components"][()]]
            self.assertEqual(names, ["tok_emb", "pos_emb", "0.0", "0.1", "mlp.0", "attn_bias", "bias"])
            self.assertAlmostEqual(float(f["parts"][()].sum()), float(f.attrs["score"]), places=4)

    def test_lens_ends_at_the_model(self):
        out = self.path("lens.h5")
        r = self.run_ok(["lens", decoder(), "--tokens", CLEAN, "--out", out, "--png", self.path("png")])
        self.assertIn("direct logit attribution", r.stdout)
        inspect = self.path("inspect.h5")
        self.run_ok(["inspect", decoder(), "--tokens", CLEAN, "--out", inspect])
        with h5py.File(out) as f, h5py.File(inspect) as g:
            lens = f["lens/logits"][()]
            self.assertEqual(lens.shape, (3, 1, 9, 32))
            np.testing.assert_allclose(lens[-1], g["logits"][()], atol=1e-6)
            total = f["dla/layer"][()].sum(axis=0) + f["dla/norm_bias"][()]
            np.testing.assert_allclose(total, f["dla/target_logit"][()], atol=1e-3)
        self.assertEqual(sorted(os.listdir(self.path("png"))), ["dla_heads.png", "lens.png"])

    def test_patch_reads_each_points_axes_from_the_model(self):
        # rotary positions add rot_q and rot_k; their head axis comes from the
        # model's description, so they patch per head like q and k
        rotary = Trained.checkpoint("rotary", dict(CONFIG, **{"model.positional": "rotary"}))
        out = self.path("r.h5")
        self.run_ok(["patch", rotary, "--clean", CLEAN, "--corrupt", CORRUPT, *ANSWERS, "--hooks", "rot_q,attn.rot_k,k",
                     "--out", out])
        with h5py.File(out) as f:
            for hook in ("rot_q", "attn.rot_k", "k"):
                self.assertEqual(f[f"grid/{hook}"].attrs["axes"], "layer,head", hook)
                self.assertEqual(f[f"grid/{hook}/values"].shape, (2, 2), hook)
            # rot_k is k turned: patching either per head gives the same cells
            np.testing.assert_allclose(f["grid/attn.rot_k/values"][()], f["grid/k/values"][()], atol=1e-5)

    def test_inspect_hooks_and_cache(self):
        out = self.path("i.h5")
        self.run_ok(["inspect", decoder(), "--tokens", CLEAN, "--out", out, "--hooks", "blocks.1.attn.z,blocks.*.resid_mid"])
        with h5py.File(out) as f:
            self.assertEqual(f["hooks/blocks.1.attn.z"].shape, (1, 9, 2, 8))
            self.assertEqual(sorted(f["hooks"].keys()), ["blocks.0.resid_mid", "blocks.1.attn.z", "blocks.1.resid_mid"])
            # each point's axes, as the model describes them
            self.assertEqual(f["hooks"].attrs["blocks.1.attn.z"], "batch query_pos head d_head")
            self.assertEqual(f["hooks"].attrs["blocks.0.resid_mid"], "batch pos d_model")
        cache = self.path("c.h5")
        r = self.run_ok(["cache", decoder(), "--hooks", "blocks.*.attn.pattern,logits", "--batches", "3", "--out", cache])
        self.assertIn("24 sequences, 3 hook points", r.stdout)
        with h5py.File(cache) as f:
            self.assertEqual(f.attrs["format"], "attnlab-cache")
            T = f["tokens"].shape[1]
            self.assertEqual(f["tokens"].shape, (24, T))
            self.assertEqual(f["hooks/blocks.0.attn.pattern"].shape, (24, 2, T, T))
            self.assertEqual(f["hooks/logits"].shape, (24, T, 32))
            self.assertEqual(f["hooks/logits"].chunks[0], 8)
            self.assertEqual(f["hooks"].attrs["blocks.0.attn.pattern"], "batch head query_pos key_pos")
            self.assertEqual(f["hooks"].attrs["logits"], "batch pos vocab")
            w = f["hooks/blocks.1.attn.pattern"][()]
            lengths = f["lengths"][()]
            for b in range(24):  # rows over the real keys sum to 1
                np.testing.assert_allclose(w[b, :, : lengths[b], : lengths[b]].sum(-1), 1.0, atol=1e-5)

    def test_example_prints_the_chapters_numbers(self):
        r = self.run_ok(["example"])
        self.assertIn("query 4 attends to keys 1..5 with 0.230 0.241 0.265 0.264 0.000", r.stdout)
        self.assertIn("scores   (2,2,5,5)", r.stdout)
        self.assertIn("masked mass attention[0, 0, 1, 2:] = 0", r.stdout)

    def test_bad_inputs_exit_2_with_one_line(self):
        ckpt = decoder()
        enc_dec = Trained.checkpoint("enc_dec", ENC_DEC)
        post_norm = Trained.checkpoint("post_norm", dict(CONFIG, **{"model.norm": "post"}))
        bad_pairs = self.path("bad_pairs.h5")
        with h5py.File(bad_pairs, "w") as f:
            f["clean"] = np.array([[3, 4, 5]])
            f["corrupt"] = np.array([[3.5, 4, 5]])
        short_pairs = self.path("short_pairs.h5")
        with h5py.File(short_pairs, "w") as f:
            f["clean"] = np.array([[3, 4, 5], [3, 4, 6]])
            f["corrupt"] = np.array([[3, 4, 5]])
        base = ["--clean", CLEAN, "--corrupt", CORRUPT, *ANSWERS]
        cases = [
            (["patch", ckpt, *base, "--hooks", "zz"], ["unknown hook 'zz'"]),
            (["patch", ckpt, "--clean", CLEAN, "--corrupt", "3 8 4", *ANSWERS], ["9 tokens", "3", "one length"]),
            (["patch", ckpt, "--clean", CLEAN, "--corrupt", "3 8 4 11 5 1 5 12 99", *ANSWERS], ["--corrupt", "99", "vocabulary"]),
            (["patch", ckpt, *base, "--metric", "kl"], ["--metric", "kl"]),
            (["patch", ckpt, "--clean", CLEAN, "--corrupt", CORRUPT, "--answers", "9:9"], ["both token 9"]),
            (["patch", ckpt, "--clean", CLEAN, "--corrupt", CORRUPT, "--answers", "9-8"], ["--answers", "9-8"]),
            (["patch", ckpt, "--clean", CLEAN, "--corrupt", CORRUPT, "--positions", "20", "--answers", "9:8"], ["position 20"]),
            (["patch", ckpt, "--clean", CLEAN], ["--corrupt"]),
            # clean into clean: norm_logit_diff would divide 0 by 0 (it printed -nan in every cell, exit 0)
            (["patch", ckpt, "--clean", CLEAN, "--corrupt", CLEAN, *ANSWERS], ["same logit difference", "--metric logit_diff"]),
            (["path-patch", ckpt, "--clean", CLEAN, "--corrupt", CLEAN, *ANSWERS, "--sender", "0.0", "--receiver", "1.0:q"],
             ["same logit difference"]),
            (["patch", ckpt, "--pairs", bad_pairs], ["/corrupt", "integer"]),
            (["patch", ckpt, "--pairs", short_pairs], ["/corrupt", "2 rows"]),
            (["patch", ckpt, "--pairs", self.path("missing.h5")], ["missing.h5"]),
            (["patch", ckpt, *base, "--out", self.path("no_such_dir", "p.h5")], ["does not exist"]),
            (["patch", enc_dec, *base], ["decoder models"]),
            (["path-patch", ckpt, *base, "--sender", "1.0", "--receiver", "1.1:q"], ["not upstream"]),
            (["path-patch", ckpt, *base, "--sender", "0.0", "--receiver", "1.0:x"], ["q, k or v"]),
            (["path-patch", ckpt, *base, "--sender", "0.7", "--receiver", "1.0:q"], ["0.7", "2 heads"]),
            (["path-patch", ckpt, *base, "--sender", "0.0", "--receiver", "5.0:q"], ["layer 5"]),
            (["path-patch", ckpt, *base, "--sender", "0.0"], ["--receiver is required"]),
            (["circuit", ckpt, *base, "--method", "acdc"], ["--method", "acdc"]),
            (["circuit", ckpt, *base, "--compare", "eap"], ["--compare", "eap"]),
            (["circuit", ckpt, *base, "--ig-steps", "0"], ["--ig-steps"]),
            (["circuit", ckpt, *base, "--batch-tokens", "-5"], ["--batch-tokens"]),
            (["circuit", ckpt, "--clean", CLEAN, "--corrupt", CLEAN, *ANSWERS], ["same logit difference"]),
            (["circuit", ckpt, "--pairs", short_pairs], ["/corrupt", "2 rows"]),
            (["circuit", ckpt, *base, "--out", ckpt], ["--out"]),
            (["circuit", enc_dec, *base], ["encoder-decoder"]),
            (["circuit", post_norm, *base], ["post-norm"]),
            (["decompose", ckpt, "--tokens", CLEAN, "--head", "1", "--query", "8", "--key", "3"], ["--head '1'", "L.H"]),
            (["decompose", ckpt, "--tokens", CLEAN, "--head", "1.5", "--query", "8", "--key", "3"], ["2 heads"]),
            (["decompose", ckpt, "--tokens", CLEAN, "--head", "1.0", "--query", "3", "--key", "8"], ["not eligible"]),
            (["decompose", ckpt, "--tokens", CLEAN, "--head", "1.0", "--query", "9", "--key", "3"], ["9 positions"]),
            (["decompose", ckpt, "--tokens", CLEAN, "--head", "1.0", "--query", "8"], ["--key is required"]),
            (["decompose", enc_dec, "--tokens", "3 4", "--head", "0.0", "--query", "1", "--key", "0"], ["encoder-decoder"]),
            (["decompose", post_norm, "--tokens", CLEAN, "--head", "1.0", "--query", "8", "--key", "3"], ["post"]),
            (["lens", ckpt, "--tokens", "3 99"], ["--tokens", "99"]),
            (["lens", ckpt, "--tokens", CLEAN, "--target", "3 4"], ["--target"]),
            (["lens", enc_dec, "--tokens", "3 4"], ["decoder models"]),
            (["inspect", ckpt, "--tokens", CLEAN, "--out", self.path("x.h5"), "--hooks", "blocks.0.atn.z"], ["no hook point matches"]),
            (["cache", ckpt, "--hooks", "blocks.9.attn.z", "--out", self.path("c.h5")], ["no hook point matches"]),
            (["cache", ckpt, "--hooks", "logits"], ["--out is required"]),
            (["example", "extra"], ["no arguments"]),
        ]
        work = tempfile.mkdtemp(prefix="attnlab_interventions_refused_")
        self.addCleanup(shutil.rmtree, work, ignore_errors=True)
        runs = tempfile.mkdtemp(prefix="attnlab_interventions_runs_")
        self.addCleanup(shutil.rmtree, runs, ignore_errors=True)
        before = {os.path.dirname(os.path.dirname(ckpt)): cc.tree_hashes(os.path.dirname(os.path.dirname(ckpt)))}
        for args, wants in cases:
            with self.subTest(args=" ".join(args)):
                cc.run_refused(self, args, work, runs, wants, before)
        for name in ("x.h5", "c.h5"):
            self.assertFalse(os.path.exists(self.path(name)), name)


if __name__ == "__main__":
    cc.main()
