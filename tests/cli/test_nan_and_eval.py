"""A loss that turns non-finite stops the run with exit status 1 and a message
naming the step, keeping the last good checkpoint; `attnlab eval CHECKPOINT` of
a finished run prints loss and accuracies and exits 0.

    /usr/bin/python3 tests/cli/test_nan_and_eval.py ATTNLAB_BINARY REPO_ROOT
"""
import hashlib
import json
import math
import os
import re
import unittest

import h5py
import numpy as np

import cli_common as cc

# Blows up at once: AdamW moves every weight by about lr at the first step.
EXPLODE = {"optim.lr": "1e30", "optim.warmup": "0", "train.checkpoint_every": "1", "train.log_every": "1"}

EVAL_LINE = re.compile(r"checkpoint (?P<path>.+) \(step (?P<step>\d+)\): loss (?P<loss>\S+)\s+token accuracy (?P<tok>\S+)"
                       r"\s+sequence accuracy (?P<seq>\S+)")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class NonFinite(cc.TempDirTest):
    def check_stops(self, **extra):
        out = self.path("runs")
        run_dir = os.path.join(out, "default")
        args = ["train"] + cc.overrides(**EXPLODE, **{"run.out_dir": out}, **extra)
        r = cc.attnlab(args, self.tmp)
        shown = f"attnlab {' '.join(args)}\nexit {r.returncode}\nstderr:\n{r.stderr}"
        self.assertEqual(r.returncode, 1, shown)
        last = r.stderr.rstrip("\n").splitlines()[-1]
        m = re.search(r"step (\d+): .*(NaN|infinite)", last)
        self.assertIsNotNone(m, "the last line does not name the step and the problem\n" + shown)
        bad_step = int(m.group(1))
        steps = cc.checkpoint_steps(run_dir)
        self.assertTrue(steps, "no checkpoint kept\n" + shown)
        self.assertLess(steps[-1], bad_step, shown)
        good = cc.checkpoint_path(run_dir, steps[-1])
        self.assertIn(good, last, "the message does not name the last good checkpoint\n" + shown)
        with h5py.File(good, "r") as f:
            self.assertEqual(int(f.attrs["step"]), steps[-1])
            for name, d in f["params"].items():
                self.assertTrue(np.all(np.isfinite(d[()])), f"{good}: params/{name} is not finite")
        self.assertFalse(os.path.exists(os.path.join(run_dir, "summary.json")), "a failed run wrote summary.json")
        with cc.open_metrics(os.path.join(run_dir, "metrics.h5")) as f:
            logged, loss = f["train/step"][()], f["train/loss"][()]
        self.assertTrue(np.all(logged < bad_step), logged)
        self.assertTrue(np.all(np.isfinite(loss)), loss)

    def test_lr_1e30_stops_with_exit_1(self):
        # The default masked_rows = "error": a score row that overflows is a
        # numerical failure, not a row with no eligible key.
        self.check_stops()

    def test_nonfinite_loss_stops_with_exit_1_masked_rows_zero(self):
        self.check_stops(**{"model.masked_rows": "zero"})


class Eval(cc.TempDirTest):
    def eval_line(self, args):
        r = self.run_ok(["eval"] + args)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stdout)
        m = EVAL_LINE.search(lines[0])
        self.assertIsNotNone(m, r.stdout)
        return m, r.stdout

    def check_finished_run(self, config, label):
        out = self.path(label)
        self.run_ok(["train"] + cc.overrides(config, **{"run.out_dir": out}))
        run_dir = os.path.join(out, "default")
        steps = int(config["train.steps"])
        checkpoint = cc.checkpoint_path(run_dir, steps)
        before = sha256(checkpoint)
        m, stdout = self.eval_line([checkpoint])
        self.assertEqual(int(m.group("step")), steps)
        loss, tok, seq = float(m.group("loss")), float(m.group("tok")), float(m.group("seq"))
        self.assertTrue(math.isfinite(loss) and loss > 0, stdout)
        self.assertTrue(0 <= tok <= 1 and 0 <= seq <= 1, stdout)
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        # Fresh data from the same task: close to the run's own final evaluation.
        self.assertLess(abs(tok - summary["eval_token_acc"]), 0.2, f"{stdout}\nsummary: {summary}")
        self.assertLess(abs(loss - summary["eval_loss"]), 0.5 * summary["eval_loss"], f"{stdout}\nsummary: {summary}")
        # Deterministic, and read-only.
        _, again = self.eval_line([checkpoint])
        self.assertEqual(again, stdout)
        self.assertEqual(sha256(checkpoint), before, "eval changed the checkpoint")
        # Options: another seed and batch count still give a valid line.
        m2, _ = self.eval_line([checkpoint, "--batches", "2", "--seed", "7"])
        self.assertTrue(0 <= float(m2.group("tok")) <= 1)
        # The run folder stands for its newest checkpoint: the same line.
        _, from_folder = self.eval_line([run_dir])
        self.assertEqual(from_folder, stdout)

    def test_eval_decoder_run(self):
        config = dict(cc.TINY, **{"train.steps": "60", "optim.lr": "3e-3", "optim.warmup": "5"})
        self.check_finished_run(config, "dec")

    def test_eval_encoder_decoder_run(self):
        config = dict(cc.TINY, **{"task.name": "translate", "model.kind": "encoder-decoder", "train.steps": "40"})
        self.check_finished_run(config, "encdec")


class EvalLengths(cc.TempDirTest):
    """eval --min-len/--max-len: lengths the model never saw (length
    generalisation); a learned position table refuses beyond itself."""

    @classmethod
    def tearDownClass(cls):
        cc.Trained.remove()

    def checkpoint(self, positional):
        return cc.Trained.checkpoint(positional, dict(cc.TINY, **{"model.positional": positional}))

    def run_eval(self, args):
        return cc.attnlab(["eval"] + args, self.tmp)

    def test_longer_sequences_without_a_table(self):
        for positional in ("sinusoidal", "rotary", "alibi", "none"):
            checkpoint = self.checkpoint(positional)
            r = self.run_eval([checkpoint, "--min-len", "7", "--max-len", "9"])  # trained on 3..6 pairs
            self.assertEqual(r.returncode, 0, f"{positional}: {r.stderr}")
            m = EVAL_LINE.search(r.stdout)
            self.assertIsNotNone(m, r.stdout)
            self.assertIn("at lengths 7..9 (trained on 3..6)", r.stdout)
            self.assertTrue(math.isfinite(float(m.group("loss"))), r.stdout)
            # the same lengths as training: the plain eval's figures
            same = self.run_eval([checkpoint, "--min-len", "3", "--max-len", "6"])
            plain = self.run_eval([checkpoint])
            self.assertEqual(same.returncode, 0, same.stderr)
            self.assertEqual(EVAL_LINE.search(same.stdout).groups(), EVAL_LINE.search(plain.stdout).groups())

    def test_learned_positions_refuse_beyond_their_table(self):
        checkpoint = self.checkpoint("learned")
        ok = self.run_eval([checkpoint, "--min-len", "4", "--max-len", "5"])  # within the table: fine
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("at lengths 4..5", ok.stdout)
        r = self.run_eval([checkpoint, "--max-len", "9"])
        shown = f"exit {r.returncode}\nstdout: {r.stdout!r}\nstderr: {r.stderr!r}"
        self.assertEqual(r.returncode, 2, shown)
        self.assertEqual(r.stdout, "", shown)
        self.assertEqual(r.stderr.count("\n"), 1, shown)
        self.assertIn("--max-len 9 needs", r.stderr)
        self.assertIn("learned table", r.stderr)

    def test_bad_lengths(self):
        checkpoint = self.checkpoint("learned")
        for args, want in ((["--min-len", "0"], "--min-len: must be in"), (["--max-len", "x"], "--max-len: expected an integer"),
                           (["--min-len", "6", "--max-len", "4"], "--min-len 6 is above --max-len 4"),
                           (["--max-len", "15"], "recall needs distinct keys")):
            r = self.run_eval([checkpoint] + args)
            shown = f"{args}: exit {r.returncode}\nstderr: {r.stderr!r}"
            self.assertEqual(r.returncode, 2, shown)
            self.assertEqual(r.stderr.count("\n"), 1, shown)
            self.assertIn(want, r.stderr, shown)


class EvalLengthsDuringTraining(cc.TempDirTest):
    """train.eval_lengths = [A, B]: every evaluation also at those task lengths,
    logged to /eval_lengths of metrics.h5 and to summary.json; a resume goes on."""

    def test_logged_beside_every_evaluation_and_resumed(self):
        out = self.path("runs")
        config = dict(cc.TINY, **{"model.positional": "alibi", "train.eval_lengths": "[7, 9]", "run.out_dir": out})
        self.run_ok(["train"] + cc.overrides(config))
        run = os.path.join(out, "default")
        with cc.open_metrics(os.path.join(run, "metrics.h5")) as f:
            self.assertEqual(list(f["eval_lengths/step"][()]), list(f["eval/step"][()]))
            acc = f["eval_lengths/token_acc"][()]
            self.assertTrue(np.all((acc >= 0) & (acc <= 1)), acc)
            self.assertTrue(np.all(np.isfinite(f["eval_lengths/loss"][()])))
        with open(os.path.join(run, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["eval_lengths"], [7, 9])
        self.assertTrue(0 <= summary["eval_lengths_token_acc"] <= 1, summary)
        # resumed with more steps: the series goes on where the checkpoint was
        with open(os.path.join(run, "config.toml")) as f:
            text = f.read()
        with open(os.path.join(run, "config.toml"), "w") as f:
            f.write(text.replace("steps = 40", "steps = 60"))
        self.run_ok(["train", "--resume", run])
        with cc.open_metrics(os.path.join(run, "metrics.h5")) as f:
            self.assertEqual(list(f["eval_lengths/step"][()]), [20, 40, 60])
        # off by default: no group, no summary keys
        plain = self.path("plain")
        self.run_ok(["train"] + cc.overrides(**{"run.out_dir": plain}))
        with cc.open_metrics(os.path.join(plain, "default", "metrics.h5")) as f:
            self.assertNotIn("eval_lengths", f)
        with open(os.path.join(plain, "default", "summary.json")) as f:
            self.assertNotIn("eval_lengths", json.load(f))


class DeviceOption(cc.TempDirTest):
    """--device cpu|cuda on every command that loads a checkpoint: a bad name,
    or cuda where no device is present, is one line and exit 2 before any work."""

    @classmethod
    def tearDownClass(cls):
        cc.Trained.remove()

    COMMANDS = {
        "eval": [], "audit": [], "ablate": [], "cache": ["--hooks", "blocks.*.attn.z"],
        "generate": ["--prompt", "5 6 7"], "inspect": ["--tokens", "5 6 7 8"], "lens": ["--tokens", "5 6 7 8"],
        "patch": ["--clean", "5 6 7 8", "--corrupt", "5 9 7 8", "--metric", "prob"],
        "path-patch": ["--clean", "5 6 7 8", "--corrupt", "5 9 7 8", "--metric", "prob", "--sender", "0.0",
                       "--receiver", "1.0:q"],
    }

    def test_bad_and_absent_devices(self):
        checkpoint = cc.Trained.checkpoint("learned", dict(cc.TINY))
        for command, args in self.COMMANDS.items():
            extra = ["--out", self.path(f"{command}.h5")] if command in ("inspect", "cache") else []
            for device, want in (("tpu", "--device: must be \"cpu\" or \"cuda\", got 'tpu'"), ("cuda", "--device cuda: ")):
                r = cc.attnlab([command, checkpoint, "--device", device] + args + extra, self.tmp)
                shown = f"{command} --device {device}: exit {r.returncode}\nstdout: {r.stdout!r}\nstderr: {r.stderr!r}"
                if device == "cuda" and r.returncode == 0:
                    continue  # a machine with a GPU: the command ran there
                self.assertEqual(r.returncode, 2, shown)
                self.assertEqual(r.stderr.count("\n"), 1, shown)
                self.assertIn(want, r.stderr, shown)
                self.assertEqual(os.listdir(self.tmp), [], shown)
        plain = cc.attnlab(["eval", checkpoint], self.tmp)
        on_cpu = cc.attnlab(["eval", checkpoint, "--device", "cpu"], self.tmp)
        self.assertEqual(on_cpu.returncode, 0, on_cpu.stderr)
        self.assertEqual(on_cpu.stdout, plain.stdout)


if __name__ == "__main__":
    cc.main()
