"""`attnlab audit` and `attnlab ablate` as processes, on tiny trained checkpoints:
audit exits 0 with every live test PASS (text and --json, both model kinds) and
refuses a checkpoint whose weights are NaN (exit 2, one line); ablate prints the
sorted table, writes its HDF5 file (default beside the checkpoint) and --maps,
which tools/plot_heads.py draws; bad arguments and files exit 2 with one line
and write nothing.

    /usr/bin/python3 tests/cli/test_audit_ablate.py ATTNLAB_BINARY REPO_ROOT
"""
import json
import os
import re
import shutil
import subprocess
import unittest

import h5py
import numpy as np

import cli_common as cc

# 2 layers, 2 heads over 1 K/V head (grouped), width 16: d_h = 8
CONFIG = dict(cc.TINY, **{"model.layers": "2", "model.kv_heads": "1"})
ENC_DEC = dict(CONFIG, **{"task.name": "translate", "model.kind": "encoder-decoder"})


Trained = cc.Trained  # the tiny runs, trained once for the whole file


def tearDownModule():
    Trained.remove()


class Audit(cc.TempDirTest):
    def test_decoder_passes_every_live_test(self):
        checkpoint = Trained.checkpoint("dec", CONFIG)
        r = self.run_ok(["audit", checkpoint, "--batches", "2"])
        tests = re.findall(r"^  (PASS|FAIL)  (.+?): ", r.stdout, re.M)
        self.assertGreaterEqual(len(tests), 12, r.stdout)
        self.assertTrue(all(v == "PASS" for v, _ in tests), r.stdout)
        self.assertIn(f"audit: {len(tests)} passed, 0 failed", r.stdout)
        for name in ["causal perturbation", "padding invariance", "KV cache vs full recomputation",
                     "dense reference", "all-masked rows"]:
            self.assertTrue(any(name in t for _, t in tests), f"no {name} test\n{r.stdout}")
        for item in ["width D", "heads H", "head width d_h", "K/V heads H_kv", "projections", "scale", "softmax axis",
                     "masks", "all-masked rows", "dropout", "dtype", "sequence lengths", "cache policy",
                     "KV cache per token", "score matrix", "forward pass", "peak memory"]:
            self.assertIn(item, r.stdout)

    def test_json_record(self):
        checkpoint = Trained.checkpoint("dec", CONFIG)
        r = self.run_ok(["audit", checkpoint, "--json", "--batches", "1"])
        record = json.loads(r.stdout)
        self.assertTrue(record["passed"])
        m, cost = record["model"], record["cost"]
        self.assertEqual((m["layers"], m["width"], m["heads"], m["kv_heads"], m["head_width"]), (2, 16, 2, 1, 8))
        self.assertEqual(cost["kv_bytes_per_token"], 2 * 2 * 1 * 8 * 4)
        longest = record["data"]["longest"]
        self.assertEqual(cost["kv_bytes_at_longest"], 128 * longest)
        self.assertEqual(cost["kv_bytes_measured"], cost["kv_bytes_at_longest"])
        self.assertEqual(cost["score_elements"][0]["per_layer_per_sequence"], 2 * longest * longest)
        self.assertEqual(m["projections"]["blocks.1.attn.k_proj.weight"], [8, 16])
        self.assertEqual(m["projections"]["blocks.1.attn.out_proj.weight"], [16, 16])
        self.assertAlmostEqual(record["attention"]["scale"], 8 ** -0.5)
        self.assertEqual(len(record["scores"]), 2)
        self.assertEqual(len(record["heads"]), 4)
        self.assertTrue(all(h["masked_mass_max"] == 0 for h in record["heads"]))
        self.assertTrue(all(t["pass"] for t in record["tests"]))
        self.assertGreater(cost["tokens_per_s"], 0)

    def test_encoder_decoder_passes_every_live_test(self):
        checkpoint = Trained.checkpoint("encdec", ENC_DEC)
        r = self.run_ok(["audit", checkpoint, "--json", "--batches", "1"])
        record = json.loads(r.stdout)
        self.assertTrue(record["passed"], r.stdout)
        self.assertEqual([k["kind"] for k in record["attention"]["masks"]], ["enc_self", "dec_self", "cross"])
        names = " | ".join(t["name"] for t in record["tests"])
        for kind in ["enc_self", "dec_self", "cross"]:
            self.assertIn(f"padding invariance ({kind}", names)

    def test_nan_weights_are_refused_on_load(self):
        # A checkpoint holds finite weights only (issue 13): a NaN is bad input
        # (exit 2, one line naming the file, the parameter and the first index),
        # not a model to audit.
        checkpoint = Trained.checkpoint("dec", CONFIG)
        broken = self.path("nan.h5")
        shutil.copy(checkpoint, broken)
        with h5py.File(broken, "r+") as f:
            w = f["params/blocks.0.attn.q_proj.weight"]
            w[...] = np.full(w.shape, np.nan, dtype=np.float32)
        r = cc.attnlab(["audit", broken, "--batches", "1"], self.tmp)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn(f"{broken}: /params/blocks.0.attn.q_proj.weight: element [0, 0] is NaN", r.stderr)


class Ablate(cc.TempDirTest):
    def test_table_file_and_maps(self):
        src = Trained.checkpoint("dec", CONFIG)
        checkpoint = self.path("step_0000040.h5")
        shutil.copy(src, checkpoint)
        maps = self.path("maps.h5")
        r = self.run_ok(["ablate", checkpoint, "--batches", "2", "--maps", maps, "--together", "1.0+1.1,0.0+0.1"])
        self.assertIn("self 1.0 + self 1.1", r.stdout)
        rows = re.findall(r"^\s+(\d+)\s+(self)\s+(\d+)\s+(\d+) \|.*\|\s+([+-]\d+\.\d+)$", r.stdout, re.M)
        self.assertEqual(len(rows), 4, r.stdout)
        effects = [float(x[4]) for x in rows]
        self.assertEqual(effects, sorted(effects, reverse=True), r.stdout)
        out = self.path("step_0000040.ablation.h5")  # the default: beside the checkpoint
        self.assertTrue(os.path.isfile(out), os.listdir(self.tmp))
        with h5py.File(out, "r") as f:
            self.assertEqual(f.attrs["format"], "attnlab-ablation")
            effect = f["ranked/effect"][()]
            self.assertTrue(np.all(np.diff(effect) <= 0), effect)
            self.assertTrue(np.allclose(effect, np.maximum(f["ranked/zero_loss"][()], f["ranked/mean_loss"][()])
                                        - f.attrs["baseline_loss"]))
            self.assertEqual(f["self/zero_loss"].shape, (2, 2))
            self.assertEqual(f["self/mean_output"].shape, (2, 2, 8))
            self.assertEqual([n.decode() if isinstance(n, bytes) else n for n in f["together/name"][()]],
                             ["self 1.0 + self 1.1", "self 0.0 + self 0.1"])
            self.assertEqual(f["together/zero_loss"].shape, (2,))
            # the grids hold the same numbers as the ranked rows
            for k, (layer, head) in enumerate(zip(f["ranked/layer"][()], f["ranked/head"][()])):
                self.assertEqual(f["self/zero_loss"][layer, head], f["ranked/zero_loss"][k])
        with h5py.File(maps, "r") as f:
            self.assertEqual(f.attrs["format"], "attnlab-maps")
            B, T = f["tokens"].shape
            w = f["attention/self/layer_1"][()]
            self.assertEqual(w.shape, (B, 2, T, T))
            self.assertTrue(np.allclose(w[:, :, 0, :].sum(-1), 1, atol=1e-5))  # query 0 of every item and head
        # tools/plot_heads.py draws the maps
        tool = os.path.join(cc.REPO_ROOT, "tools", "plot_heads.py")
        p = subprocess.run(["/usr/bin/python3", tool, maps, "--head", "1.0", "--prefix", "x_", "--out-dir", self.path("img")],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(os.listdir(self.path("img"))), ["x_L1H0.png", "x_heads.png"])

    def test_explicit_out(self):
        checkpoint = Trained.checkpoint("encdec", ENC_DEC)
        out = self.path("table.h5")
        r = self.run_ok(["ablate", checkpoint, "--batches", "1", "--out", out])
        self.assertIn("wrote " + out, r.stdout)
        with h5py.File(out, "r") as f:
            self.assertEqual(len(f["ranked/kind"]), 3 * 2 * 2)
            for kind in ["enc_self", "dec_self", "cross"]:
                self.assertIn(kind, f)


class BadInput(cc.TempDirTest):
    def check_bad(self, args):
        before = cc.tree_hashes(self.tmp)
        r = cc.attnlab(args, self.tmp)
        shown = f"attnlab {' '.join(args)}\nexit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        self.assertEqual(r.returncode, 2, shown)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, shown)
        self.assertTrue(lines[0].startswith(f"attnlab {args[0]}: "), shown)
        self.assertEqual(r.stdout, "", shown)
        self.assertEqual(cc.tree_hashes(self.tmp), before, "something was written\n" + shown)
        return lines[0]

    def test_bad_arguments_and_files(self):
        checkpoint = self.path("ckpt.h5")
        shutil.copy(Trained.checkpoint("dec", CONFIG), checkpoint)
        with open(self.path("not_hdf5.h5"), "w") as f:
            f.write("hello\n")
        os.mkdir(self.path("adir"))
        for command in ["audit", "ablate"]:
            self.check_bad([command])
            self.check_bad([command, self.path("missing.h5")])
            self.check_bad([command, self.path("not_hdf5.h5")])
            self.check_bad([command, checkpoint, checkpoint])
            self.check_bad([command, checkpoint, "--batches", "0"])
            self.check_bad([command, checkpoint, "--batches", "x"])
            self.check_bad([command, checkpoint, "--no-such-option"])
        self.check_bad(["ablate", checkpoint, "--out", self.path("nodir", "t.h5")])
        self.check_bad(["ablate", checkpoint, "--out", self.path("adir")])
        self.check_bad(["ablate", checkpoint, "--out", checkpoint])
        self.check_bad(["ablate", checkpoint, "--out", self.path("t.h5"), "--maps", self.path("t.h5")])
        self.check_bad(["ablate", checkpoint, "--maps", self.path("nodir", "m.h5")])
        for spec in ["2.0", "0.5", "cross:0.0", "1", "1.0+", "a.b"]:
            self.check_bad(["ablate", checkpoint, "--together", spec])
        # a checkpoint whose parameters do not fit its config
        wrong = self.path("wrong.h5")
        shutil.copy(checkpoint, wrong)
        with h5py.File(wrong, "r+") as f:
            del f["params/blocks.1.attn.q_proj.weight"]
        before = cc.tree_hashes(self.tmp)
        for command in ["audit", "ablate"]:
            r = cc.attnlab([command, wrong], self.tmp)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("blocks.1.attn.q_proj.weight", r.stderr)
        self.assertEqual(cc.tree_hashes(self.tmp), before)


if __name__ == "__main__":
    cc.main()
