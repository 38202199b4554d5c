"""Exact resume: a run killed (SIGKILL) or interrupted (SIGINT, SIGTERM) and then
continued with `attnlab train --resume RUN_DIR` logs bit for bit the same losses,
learning rates, gradient norms, evaluations and attention metrics as the same
run left alone, and ends with the same parameters. Dropout is on, so the
dropout generator's state must survive the resume too.

    /usr/bin/python3 tests/cli/test_resume.py ATTNLAB_BINARY REPO_ROOT
"""
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import unittest

import h5py
import numpy as np

import cli_common as cc

STEPS = 150
# About 6 ms a step on one core: the run lasts long enough past step 20 to be
# stopped in the middle.
CONFIG = dict(cc.TINY, **{
    "model.width": "32", "model.layers": "2", "model.ffn": "64", "train.batch": "16",
    "train.steps": str(STEPS), "train.log_every": "5", "train.eval_every": "20", "train.checkpoint_every": "10",
    "model.dropout": "0.1", "model.attn_dropout": "0.1", "optim.warmup": "10",
})

SERIES = {
    "train": ["step", "loss", "lr", "grad_norm"],  # tokens_per_s and wall_s are timings
    "eval": ["step", "loss", "token_acc", "seq_acc"],
}
ATTENTION = ["step", "entropy", "entropy_norm", "masked_mass", "masked_mass_max", "score_std"]


def read_metrics(path):
    out = {}
    with cc.open_metrics(path) as f:
        for group, names in SERIES.items():
            for name in names:
                out[f"{group}/{name}"] = f[group][name][()]
        for kind in f["attention"]:
            for name in ATTENTION:
                out[f"attention/{kind}/{name}"] = f["attention"][kind][name][()]
    return out


def read_params(path):
    with h5py.File(path, "r") as f:
        return {name: f["params"][name][()] for name in f["params"]}


def assert_same_end(test, reference, run_dir, steps):
    """run_dir, interrupted and resumed, ends as `reference` left alone did: the
    final parameters and the train/loss series, bit for bit."""
    pa, pb = read_params(cc.checkpoint_path(reference, steps)), read_params(cc.checkpoint_path(run_dir, steps))
    for name in pa:
        test.assertTrue(np.array_equal(pa[name], pb[name]), f"final parameter {name} differs")
    with cc.open_metrics(os.path.join(reference, "metrics.h5")) as fa, cc.open_metrics(os.path.join(run_dir, "metrics.h5")) as fb:
        np.testing.assert_array_equal(fa["train/loss"][()], fb["train/loss"][()])


class Resume(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnlab_cli_resume_")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)  # also when setUpClass fails
        # Run A, uninterrupted: the reference.
        cls.run_a = cls.train_run("a")

    @classmethod
    def train_run(cls, label):
        out = os.path.join(cls.tmp, label)
        r = cc.attnlab(["train"] + cc.overrides(CONFIG, **{"run.out_dir": out}), cls.tmp, timeout=120)
        assert r.returncode == 0, r.stderr
        return os.path.join(out, "default")

    def args(self, label):
        return ["train"] + cc.overrides(CONFIG, **{"run.out_dir": os.path.join(self.tmp, label)})

    def stop_midway(self, label, sig):
        """Starts a run, waits for a checkpoint at step >= 20 and a logged step past it
        (so metrics.h5 holds rows the checkpoint does not cover), sends `sig`;
        returns (run dir, exit status, log)."""
        run_dir = os.path.join(self.tmp, label, "default")
        proc = cc.start(self.args(label), self.tmp, f"{label}.log")

        def ready():
            steps = cc.checkpoint_steps(run_dir)
            if not steps or steps[-1] < 20:
                return False
            with open(proc.log_path) as f:
                logged = [int(n) for n in re.findall(r"^step (\d+)/", f.read(), re.M)]
            return any(n > steps[-1] for n in logged)

        try:
            seen = cc.wait_for(ready, proc, timeout=60)
            running = proc.poll() is None
            if running:
                proc.send_signal(sig)
        finally:
            rc, log = cc.finish(proc)
        self.assertTrue(seen, f"no checkpoint at step >= 20 appeared\n{log}")
        self.assertTrue(running, f"the run ended (exit {rc}) before it could be stopped; make it longer\n{log}")
        self.assertFalse(os.path.exists(os.path.join(run_dir, "summary.json")), "a stopped run wrote summary.json")
        steps = cc.checkpoint_steps(run_dir)
        self.assertTrue(steps and 20 <= steps[-1] < STEPS, f"checkpoints {steps}")
        with cc.open_metrics(os.path.join(run_dir, "metrics.h5")) as f:
            logged = f["train/step"][()]
        print(f"\n  {signal.Signals(sig).name}: newest checkpoint at step {steps[-1]}, "
              f"train rows logged up to step {logged.max() if len(logged) else None}", file=sys.stderr)
        return run_dir, rc, log

    def resume_and_compare(self, run_dir):
        r = cc.attnlab(["train", "--resume", run_dir], self.tmp, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(cc.checkpoint_steps(run_dir)[-1], STEPS)
        a = read_metrics(os.path.join(self.run_a, "metrics.h5"))
        b = read_metrics(os.path.join(run_dir, "metrics.h5"))
        self.assertEqual(sorted(a), sorted(b))
        np.testing.assert_array_equal(a["train/step"], np.arange(5, STEPS + 1, 5))
        np.testing.assert_array_equal(a["eval/step"], np.arange(20, STEPS + 1, 20).tolist() + [STEPS])
        for name in sorted(a):
            self.assertEqual(a[name].dtype, b[name].dtype, name)
            self.assertEqual(a[name].shape, b[name].shape, f"{name}: {a[name].shape} vs {b[name].shape}")
            self.assertFalse(np.isnan(a[name].astype(np.float64)).any(), f"{name} has NaN (unwritten) rows")
            self.assertTrue(np.array_equal(a[name], b[name]),
                            f"{name} differs after resume at rows {np.flatnonzero((a[name] != b[name]).reshape(len(a[name]), -1).any(axis=1))}:\n"
                            f"uninterrupted {a[name].ravel()[:12]}\nresumed       {b[name].ravel()[:12]}")
        pa = read_params(cc.checkpoint_path(self.run_a, STEPS))
        pb = read_params(cc.checkpoint_path(run_dir, STEPS))
        self.assertEqual(sorted(pa), sorted(pb))
        for name in pa:
            self.assertTrue(np.array_equal(pa[name], pb[name]), f"final parameter {name} differs")
        with open(os.path.join(self.run_a, "summary.json")) as f:
            sa = json.load(f)
        with open(os.path.join(run_dir, "summary.json")) as f:
            sb = json.load(f)
        for key in ("steps", "eval_loss", "eval_token_acc", "eval_seq_acc", "first_step_at_target"):
            self.assertEqual(sa[key], sb[key], key)

    def test_resume_after_sigkill_is_exact(self):
        run_dir, rc, log = self.stop_midway("b", signal.SIGKILL)
        self.assertEqual(rc, -signal.SIGKILL, log)
        self.resume_and_compare(run_dir)

    def test_sigint_checkpoints_exits_130_and_resumes_exactly(self):
        self.check_interrupt("c", signal.SIGINT)

    def test_sigterm_checkpoints_exits_130_and_resumes_exactly(self):
        self.check_interrupt("d", signal.SIGTERM)

    def check_interrupt(self, label, sig):
        run_dir, rc, log = self.stop_midway(label, sig)
        self.assertEqual(rc, 130, log)
        m = re.search(r"interrupted at step (\d+)", log)
        self.assertIsNotNone(m, log)
        step = int(m.group(1))
        # The step it finished is checkpointed, and the checkpoint says so.
        self.assertEqual(cc.checkpoint_steps(run_dir)[-1], step, log)
        with h5py.File(cc.checkpoint_path(run_dir, step), "r") as f:
            self.assertEqual(int(f.attrs["step"]), step)
        self.assertIn(run_dir, log)  # names the run to resume
        self.resume_and_compare(run_dir)


class ResumeGuards(cc.TempDirTest):
    """What --resume may change, and who may write a run."""

    def make_run(self, steps):
        out = self.path("runs")
        self.run_ok(["train"] + cc.overrides(**{"run.out_dir": out, "train.steps": str(steps)}))
        return os.path.join(out, "default")

    def test_raised_train_steps_resumes_and_is_recorded(self):
        run_dir = self.make_run(20)
        config = os.path.join(run_dir, "config.toml")
        with open(config) as f:
            text = f.read()
        self.assertIn("steps = 20\n", text)
        with open(config, "w") as f:
            f.write(text.replace("steps = 20\n", "steps = 30\n", 1))
        r = self.run_ok(["train", "--resume", run_dir])
        self.assertIn("train.steps (30, was 20)", r.stderr)
        self.assertEqual(cc.checkpoint_steps(run_dir)[-1], 30)
        with open(os.path.join(run_dir, "resumes.log")) as f:
            self.assertEqual(f.read(), "step 20: resumed with train.steps (30, was 20)\n")
        with h5py.File(cc.checkpoint_path(run_dir, 30), "r") as f:  # the new value travels on
            self.assertIn("steps = 30", f.attrs["config"])
        with cc.open_metrics(os.path.join(run_dir, "metrics.h5")) as f:
            np.testing.assert_array_equal(f["train/step"][()], np.arange(5, 31, 5))
        with open(os.path.join(run_dir, "summary.json")) as f:
            self.assertEqual(json.load(f)["steps"], 30)

    def test_a_second_writer_is_refused_while_a_run_trains(self):
        out = self.path("runs")
        long_run = cc.overrides(CONFIG, **{"run.out_dir": out, "train.steps": "100000"})
        proc = cc.start(["train"] + long_run, self.tmp)
        run_dir = os.path.join(out, "default")
        try:
            self.assertTrue(cc.wait_for(lambda: cc.checkpoint_steps(run_dir), proc, timeout=60))
            before = cc.checkpoint_steps(run_dir)
            r = cc.attnlab(["train", "--resume", run_dir], self.tmp)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"in use by another attnlab process (pid {proc.pid})", r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
            self.assertIsNone(proc.poll(), "the first writer stopped")
            self.assertLessEqual(before[-1], cc.checkpoint_steps(run_dir)[-1])
        finally:
            proc.send_signal(signal.SIGTERM)
            rc, log = cc.finish(proc)
        self.assertEqual(rc, 130, log)
        # Released on exit, and emptied: the folder keeps no stale pid.
        with open(os.path.join(run_dir, ".lock")) as f:
            self.assertEqual(f.read(), "", "the lock file keeps a pid after release")

    def test_a_new_run_never_takes_a_taken_name(self):
        out = self.path("runs")
        os.makedirs(os.path.join(out, "default"))
        with open(os.path.join(out, "default-2"), "w") as f:  # a file, not a folder
            f.write("x")
        r = self.run_ok(["train"] + cc.overrides(**{"run.out_dir": out, "train.steps": "5"}))
        self.assertIn(os.path.join(out, "default-3"), r.stderr)
        self.assertEqual(os.listdir(os.path.join(out, "default")), [])


class FiniteTrainingSet(cc.TempDirTest):
    """task.train_size: a run stopped mid-epoch and resumed (train.steps raised, the
    schedule pinned) logs the same rows, /eval_train included, and ends with the
    same parameters as the run left alone; batches of 16 over 100 examples cross
    epoch ends at both sides of the stop. Its training set is written once, as a
    token file, and the held-out evaluations never see one of its examples."""

    # copy over 2 content tokens at lengths 3..6 has 120 sequences: 20 are left to hold out
    FINITE = dict(cc.TINY, **{"task.name": "copy", "task.vocab": "5", "task.train_size": "100", "train.batch": "16", "train.steps": "60",
                              "train.eval_every": "10", "train.log_every": "5", "train.checkpoint_every": "10",
                              "optim.schedule_steps": "60", "model.dropout": "0.1"})

    def test_resume_mid_epoch_is_exact(self):
        a = os.path.join(self.path("a"), "default")
        self.run_ok(["train"] + cc.overrides(self.FINITE, **{"run.out_dir": self.path("a")}))
        b = os.path.join(self.path("b"), "default")
        self.run_ok(["train"] + cc.overrides(self.FINITE, **{"run.out_dir": self.path("b"), "train.steps": "30"}))
        with open(os.path.join(b, "config.toml")) as f:
            text = f.read()
        with open(os.path.join(b, "config.toml"), "w") as f:
            f.write(text.replace("steps = 30\n", "steps = 60\n", 1))
        with h5py.File(cc.checkpoint_path(b, 30), "r") as f:
            self.assertEqual(f["data/train_position"][()].tolist(), [30 * 16 % 100])  # 480 examples: 80 into epoch 5
        self.run_ok(["train", "--resume", b])
        series = {"train": ["step", "loss", "lr", "grad_norm"], "eval": ["step", "loss", "token_acc"],
                  "eval_train": ["step", "loss", "token_acc", "seq_acc"]}
        with cc.open_metrics(os.path.join(a, "metrics.h5")) as fa, cc.open_metrics(os.path.join(b, "metrics.h5")) as fb:
            for group, names in series.items():
                for name in names:
                    np.testing.assert_array_equal(fa[group][name][()], fb[group][name][()], f"{group}/{name}")
            self.assertEqual(fa["eval_train/step"][()].tolist(), list(range(10, 61, 10)))
        pa, pb = read_params(cc.checkpoint_path(a, 60)), read_params(cc.checkpoint_path(b, 60))
        for name in pa:
            self.assertTrue(np.array_equal(pa[name], pb[name]), f"final parameter {name} differs")
        with open(os.path.join(a, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["train_size"], 100)
        self.assertGreaterEqual(summary["train_set_token_acc"], 0.0)
        # the set on disk: 100 distinct copy sequences, none of them in a held-out batch
        with h5py.File(os.path.join(a, "train_set.h5"), "r") as f:
            tokens, lengths = f["tokens"][()], f["lengths"][()]
        train = {tuple(tokens[i, :lengths[i]]) for i in range(len(lengths))}
        self.assertEqual(len(train), 100)
        # fresh data of any seed skips the run's set: the cache holds inputs (a sequence minus its last
        # token), and a copy example is fixed by its inputs
        trained_inputs = {t[:-1] for t in train}
        for seed in ([], ["--seed", "7"]):
            out = self.path("cache.h5")
            self.run_ok(["cache", a, "--hooks", "embed", "--batches", "8", "--out", out] + seed)
            with h5py.File(out, "r") as f:
                seen = [tuple(f["tokens"][i, :f["lengths"][i]]) for i in range(len(f["lengths"]))]
            self.assertEqual(len(seen), 8 * 16)
            self.assertFalse([s for s in seen if s in trained_inputs], f"a held-out row is a training example ({seed})")
            os.remove(out)

    def test_batch_all_is_the_whole_set_every_step(self):
        out = self.path("runs")
        self.run_ok(["train"] + cc.overrides(self.FINITE, **{"run.out_dir": out, "train.batch": "all", "train.steps": "10",
                                                             "optim.schedule_steps": "10", "train.checkpoint_every": "5"}))
        with open(os.path.join(out, "default", "config.toml")) as f:
            self.assertIn('batch = "all"', f.read())
        with open(os.path.join(out, "default", "summary.json")) as f:
            summary = json.load(f)
        # tokens trained: 10 steps of all 100 sequences (copy of length 3..6: x SEP x minus one, 2n inputs)
        with h5py.File(os.path.join(out, "default", "train_set.h5"), "r") as f:
            per_epoch = int((f["lengths"][()] - 1).sum())
        with h5py.File(cc.checkpoint_path(os.path.join(out, "default"), 10), "r") as f:
            self.assertEqual(int(f["data/tokens"][0]), 10 * per_epoch)
            self.assertEqual(f["data/train_position"][()].tolist(), [100])
        self.assertEqual(summary["steps"], 10)


class SignalWhileTheRunIsWritten(cc.TempDirTest):
    """SIGTERM from the moment the run's folder exists (config.toml written, the
    training set still being written) waits for the loop: the run checkpoints at
    step 0, exits 130 and resumes to the same end as a run left alone. Before the
    first write it would end the process with nothing written; the 200,000-example
    training set makes the folder take about 0.1 s to write, the window aimed at."""

    SET = dict(cc.TINY, **{"task.train_size": "200000", "train.steps": "20", "train.checkpoint_every": "10"})

    def test_sigterm_as_the_folder_appears(self):
        reference = os.path.join(self.path("a"), "default")
        self.run_ok(["train"] + cc.overrides(self.SET, **{"run.out_dir": self.path("a")}))
        run_dir = os.path.join(self.path("b"), "default")
        proc = cc.start(["train"] + cc.overrides(self.SET, **{"run.out_dir": self.path("b")}), self.tmp, "b.log")
        try:
            seen = cc.wait_for(lambda: os.path.exists(os.path.join(run_dir, "config.toml")), proc, timeout=60, interval=0.001)
            in_setup = not os.path.exists(os.path.join(run_dir, "train_set.h5"))
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        finally:
            rc, log = cc.finish(proc)
        self.assertTrue(seen, log)
        print(f"\n  SIGTERM sent {'while the training set was being written' if in_setup else 'after the folder was written'}",
              file=sys.stderr)
        self.assertEqual(rc, 130, log)
        step = int(re.search(r"interrupted at step (\d+)", log).group(1))
        self.assertEqual(cc.checkpoint_steps(run_dir)[-1], step, log)
        if in_setup:
            self.assertEqual(step, 0, log)
        self.run_ok(["train", "--resume", run_dir])
        assert_same_end(self, reference, run_dir, 20)


class SignalWhileResuming(cc.TempDirTest):
    """SIGTERM while `train --resume` sets up (its lock on the run taken, the
    200,000-example training set rebuilt) waits for the loop: the run checkpoints
    at the step it resumed from, exits 130, and resumes again to the same end as a
    run left alone. The signal is sent once /proc/locks shows the resuming process
    holding the run's lock, so it lands inside the setup every time; before the
    handlers came this early the process died by SIGTERM there (exit -15)."""

    SET = dict(cc.TINY, **{"task.train_size": "200000", "train.steps": "20", "train.checkpoint_every": "10"})

    @staticmethod
    def holds_lock(pid, path):
        inode = os.stat(path).st_ino
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[4] == str(pid) and fields[5].split(":")[-1] == str(inode):
                    return True
        return False

    def test_sigterm_during_resume_setup(self):
        reference = os.path.join(self.path("a"), "default")
        self.run_ok(["train"] + cc.overrides(self.SET, **{"train.steps": "30", "run.out_dir": self.path("a")}))
        run_dir = os.path.join(self.path("b"), "default")
        self.run_ok(["train"] + cc.overrides(self.SET, **{"run.out_dir": self.path("b")}))
        config = os.path.join(run_dir, "config.toml")
        with open(config) as f:
            text = f.read()
        with open(config, "w") as f:
            f.write(text.replace("steps = 20", "steps = 30"))
        proc = cc.start(["train", "--resume", run_dir], self.tmp, "b.log")
        try:
            held = cc.wait_for(lambda: self.holds_lock(proc.pid, os.path.join(run_dir, ".lock")), proc, timeout=60, interval=0.001)
            in_setup = held and proc.poll() is None and not cc.checkpoint_steps(run_dir)[-1] > 20
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        finally:
            rc, log = cc.finish(proc)
        self.assertTrue(held, log)
        self.assertTrue(in_setup, log)
        self.assertEqual(rc, 130, log)
        step = int(re.search(r"interrupted at step (\d+)", log).group(1))
        self.assertEqual(cc.checkpoint_steps(run_dir)[-1], step, log)
        self.run_ok(["train", "--resume", run_dir])
        assert_same_end(self, reference, run_dir, 30)


class ConfigFileForms(cc.TempDirTest):
    """Files that must be accepted: a UTF-8 byte order mark, CRLF line endings."""

    def check(self, data):
        cfg = self.path("c.toml")
        with open(cfg, "wb") as f:
            f.write(data)
        out = self.path("runs")
        self.run_ok(["train", cfg, f"run.out_dir={out}", "train.steps=5", "train.eval_every=5", "train.checkpoint_every=5"])
        with open(os.path.join(out, "bom", "config.toml")) as f:
            text = f.read()
        self.assertIn("heads = 2\n", text)
        self.assertIn("width = 16\n", text)

    TEXT = '[run]\nname = "bom"\n[model]\nwidth = 16\nheads = 2\nlayers = 1\nffn = 32\n[train]\nbatch = 8\n'

    def test_byte_order_mark(self):
        self.check(b"\xef\xbb\xbf" + self.TEXT.encode())

    def test_crlf_line_endings(self):
        self.check(self.TEXT.replace("\n", "\r\n").encode())

    def test_byte_order_mark_and_crlf(self):
        self.check(b"\xef\xbb\xbf" + self.TEXT.replace("\n", "\r\n").encode())


if __name__ == "__main__":
    cc.main()
