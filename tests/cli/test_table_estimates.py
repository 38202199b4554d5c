"""Every analysis that builds a table growing with the vocabulary or the
positions estimates it first (issue 51, part 6): an input that cannot fit in
this machine's memory is refused before anything is computed or written, with
exit status 2 and one line naming the option and the size in GB, and no output
file, half or whole.

Each input needs terabytes, more than any machine these tests run on: logits
over a 2^22-token vocabulary, attention tables of 64 heads over 60000 or more
positions (made where an analysis records scores or patterns; the fused
attention streams over key blocks and makes none), 2^20 batches held at once.
Each refused command runs under an address-space limit (RLIMIT_AS, 4 GiB), so
that one which went ahead anyway (as before the estimates: "out of memory",
naming nothing, or computing until the timeout) fails without taking the
machine's memory.

    /usr/bin/python3 tests/cli/test_table_estimates.py ATTNLAB_BINARY REPO_ROOT
"""
import os
import resource
import subprocess
import tempfile

import h5py
import numpy as np

import cli_common as cc

ADDRESS_SPACE = 4 << 30

ONE_STEP = {"task.name": "copy", "model.positional": "rotary", "model.ffn": "0", "train.steps": "1", "train.batch": "2",
            "train.log_every": "1", "train.eval_every": "1", "train.checkpoint_every": "1", "train.eval_batches": "1"}
# 2^22 tokens: the logits are 50 MB a position, float32 and float64 (rotary positions: no table bounds them)
VOCAB = dict(ONE_STEP, **{"task.vocab": "4194304", "model.width": "2", "model.heads": "1", "model.layers": "1", "train.batch": "1"})
# 64 heads of width 2: one attention's scores or weights over 60000 positions are 0.9 TB
HEADS = dict(ONE_STEP, **{"model.width": "128", "model.heads": "64", "model.layers": "2"})
# 16384 sequences a batch: --batches 2^20 of them are 1.9 TB
WIDE = dict(ONE_STEP, **{"model.width": "16", "model.heads": "2", "model.layers": "1", "train.batch": "16384"})

LONG = " ".join(["3"] * 60000)  # near the longest one argument may be (128 KiB)

Trained = cc.Trained


def tearDownModule():
    Trained.remove()


def run_folder(label, config):
    return os.path.dirname(os.path.dirname(Trained.checkpoint(label, config)))


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


class TableEstimates(cc.TempDirTest):
    def refused(self, args, wants, watched=()):
        """attnlab `args` (in an empty folder) exits 2 with one line `attnlab CMD: OPTION...: ... need N GB,
        this machine has M GB` holding every string of `wants`, printing nothing else and leaving the
        folder and every folder of `watched` as they were."""
        work = tempfile.mkdtemp(dir=self.tmp)
        before = {folder: cc.tree_hashes(folder) for folder in watched}
        r = subprocess.run([cc.ATTNLAB] + args, cwd=work, env=cc.env(), capture_output=True, text=True, encoding="utf-8",
                           errors="replace", timeout=60, preexec_fn=limited)
        shown = f"attnlab {' '.join(a[:60] for a in args)}\nexit {r.returncode}\nstdout: {r.stdout[:500]!r}\nstderr: {r.stderr[:2000]!r}"
        self.assertEqual(r.returncode, 2, shown)
        self.assertEqual(r.stdout, "", shown)
        self.assertTrue(r.stderr.endswith("\n") and r.stderr.count("\n") == 1, "not exactly one line:\n" + shown)
        line = r.stderr.rstrip("\n")
        self.assertTrue(line.startswith(f"attnlab {args[0]}: "), shown)
        self.assertRegex(line, r" need [0-9.]+ GB, this machine has [0-9.]+ GB$", shown)
        for want in wants:
            self.assertIn(want, line, shown)
        self.assertEqual(os.listdir(work), [], "files left in the working folder\n" + shown)
        for folder, hashes in before.items():
            self.assertEqual(cc.tree_hashes(folder), hashes, f"{folder} changed\n{shown}")
        return line

    def pairs_file(self, rows, length):
        """/clean and /corrupt [rows, length] (token 3 against token 4), compressed: a few kB."""
        path = self.path("pairs.h5")
        with h5py.File(path, "w") as f:
            for name, token in (("clean", 3), ("corrupt", 4)):
                f.create_dataset(name, data=np.full((rows, length), token, np.int64), compression="gzip")
        return path

    def token_file(self, length):
        """Two sequences of `length` tokens (the `file` task's format: one is held out, the one drawn)."""
        path = self.path("tokens.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("tokens", data=np.full((2, length), 3, np.int32))
            f["lengths"] = np.array([length, length], np.int64)
        return path

    def test_positions_squared(self):
        # attention tables are made where an analysis records scores or patterns (the fused
        # attention streams over key blocks and makes none)
        run = run_folder("heads", HEADS)
        ckpt = Trained.checkpoint("heads", HEADS)
        squares = "64 heads x 60000 x 60000 positions"
        self.refused(["decompose", ckpt, "--tokens", LONG, "--head", "1.0", "--query", "5", "--key", "3"], ["--tokens", squares], [run])
        # a token file of 100001-token sequences: batches of 100000 positions
        data = self.token_file(100001)
        watched = [run, os.path.dirname(data)]
        for args in (["audit", ckpt], ["ablate", ckpt, "--maps", self.path("maps.h5")],
                     ["cache", ckpt, "--hooks", "blocks.*.attn.pattern", "--out", self.path("cache.h5")]):
            with self.subTest(command=args[0]):
                self.refused(args + ["--data", data], ["--data " + data, "64 heads x 100000 x 100000 positions"], watched)
        for name in ("maps.h5", "cache.h5"):
            self.assertFalse(os.path.exists(self.path(name)), name)

    def test_vocabulary_times_positions(self):
        run = run_folder("vocab", VOCAB)
        ckpt = Trained.checkpoint("vocab", VOCAB)
        tokens = " positions x 4194304 tokens]"
        self.refused(["lens", ckpt, "--tokens", LONG], ["--tokens", "the lens logits [2 streams x 1 x 60000" + tokens], [run])
        self.refused(["lens", ckpt, "--tokens", LONG, "--out", self.path("lens.h5")], ["--tokens"], [run])
        self.refused(["generate", ckpt, "--prompt", LONG], ["--prompt", "the logits [1 x 60000" + tokens], [run])
        # the full forward --check-cache recomputes at its last step: 3 + 65536 positions
        self.refused(["generate", ckpt, "--prompt", "3 4 5", "--check-cache", "--max-new", "65536"],
                     ["--check-cache --max-new 65536", "the logits [1 x 65539" + tokens], [run])
        # eval at lengths up to 1e6: copy sequences of 2e6 inputs
        self.refused(["eval", ckpt, "--max-len", "1000000"], ["--max-len 1000000", "the logits [1 x 2000000" + tokens], [run])
        data = self.token_file(100001)
        for command in ("eval", "ablate"):
            self.refused([command, ckpt, "--data", data], ["--data " + data, "the logits [1 x 100000" + tokens], [run])
        # 10000 pairs of 10 tokens: their logits are 8.4 TB
        pairs = self.pairs_file(10000, 10)
        watched = [run, os.path.dirname(pairs)]
        logits = "the logits [10000 x 10" + tokens
        self.refused(["patch", ckpt, "--pairs", pairs], ["--pairs", logits], watched)
        self.refused(["patch", ckpt, "--pairs", pairs, "--per-position", "--out", self.path("p.h5")], ["--pairs", logits], watched)
        self.refused(["path-patch", ckpt, "--pairs", pairs, "--sender", "embed", "--receiver", "0.0:q"], ["--pairs", logits], watched)
        for method in ("exact", "atp", "atp-star", "eap", "eap-ig"):
            with self.subTest(method=method):
                self.refused(["circuit", ckpt, "--pairs", pairs, "--method", method], ["--pairs", "10" + tokens], watched)
        self.refused(["circuit", ckpt, "--pairs", pairs, "--prune", "0.1", "--out", self.path("c.h5")], ["--pairs"], watched)
        for name in ("lens.h5", "p.h5", "c.h5"):
            self.assertFalse(os.path.exists(self.path(name)), name)
        # 65536 rows of the repeated-token batch: 36 TB of logits
        self.refused(["heads", ckpt, "--rows", "65536"], ["--rows", "[65536 x ", tokens], [run])

    def test_held_batches(self):
        run = run_folder("wide", WIDE)
        ckpt = Trained.checkpoint("wide", WIDE)
        for command in ("eval", "audit", "ablate"):
            with self.subTest(command=command):
                self.refused([command, ckpt, "--batches", "1048576"], ["--batches", "[1048576 x 16384 x "], [run])


if __name__ == "__main__":
    cc.main()
