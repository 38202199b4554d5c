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


class Resume(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnlab_cli_resume_")
        # Run A, uninterrupted: the reference.
        cls.run_a = cls.train_run("a")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

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


if __name__ == "__main__":
    cc.main()
