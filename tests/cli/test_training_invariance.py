"""Evaluation, logging, TensorBoard and checkpoint options never change training.

For each such key, a tiny run (with dropout, so that any extra draw of a random
number would show) is trained with the key changed, and its training series
(/train/loss and /train/grad_norm of metrics.h5 at the steps both runs logged)
and its final parameters must equal the reference run's bit for bit.
train.eval_lengths once enlarged the learned positional table before the
initial draw, which changed every parameter that came after it.

A resume that raises train.steps says in one line what the learning-rate
schedule does, and optim.schedule_steps keeps the old schedule.
"""
import math
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_common as cc  # noqa: E402

BASE = dict(cc.TINY, **{"model.dropout": "0.1", "model.attn_dropout": "0.1", "train.steps": "40", "train.threads": "1",
                        "task.name": "copy"})
# key -> a value other than the default or BASE's (the evaluation, logging,
# TensorBoard and checkpoint options: none of them may touch training)
VARIANTS = {
    "train.eval_every": "7",
    "train.eval_batches": "3",
    "train.eval_lengths": "[9, 12]",  # beyond the training lengths: a wider positional table
    "train.log_every": "3",
    "train.tensorboard": "true",
    "train.checkpoint_every": "7",
    "train.keep_checkpoints": "1",
    "train.target_accuracy": "0.5",
}


def series(run):
    with h5py.File(os.path.join(run, "metrics.h5"), "r") as f:
        return {int(s): (l, g) for s, l, g in zip(f["train/step"][()], f["train/loss"][()], f["train/grad_norm"][()])}


def final_params(run, steps):
    with h5py.File(cc.checkpoint_path(run, steps), "r") as f:
        out = {}
        f["params"].visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        return out


class TrainingInvariance(cc.TempDirTest):
    def train(self, label, **changes):
        out = self.path(label)
        config = dict(BASE, **changes, **{"run.out_dir": out})
        self.run_ok(["train"] + [f"{k}={v}" for k, v in config.items()], timeout=120)
        return os.path.join(out, "default")

    def test_no_evaluation_or_logging_option_changes_training(self):
        steps = int(BASE["train.steps"])
        reference = self.train("reference")
        ref_series, ref_params = series(reference), final_params(reference, steps)
        for key, value in VARIANTS.items():
            with self.subTest(key=key, value=value):
                run = self.train(key.replace(".", "_"), **{key: value})
                got = series(run)
                common = sorted(set(got) & set(ref_series))
                self.assertGreater(len(common), 0)
                for step in common:
                    self.assertEqual(got[step], ref_series[step], f"{key}={value}: step {step}")
                params = final_params(run, steps)
                for name, ref in ref_params.items():
                    if name == "pos_emb.weight" and params[name].shape != ref.shape:
                        # the wider table: its first rows are the ones training drew and used
                        np.testing.assert_array_equal(params[name][: ref.shape[0]], ref, err_msg=f"{key}: {name}")
                        continue
                    np.testing.assert_array_equal(params[name], ref, err_msg=f"{key}: {name}")

    def test_resume_with_more_steps_says_what_the_schedule_does(self):
        run = self.train("run", **{"train.steps": "40", "optim.warmup": "5"})
        config = os.path.join(run, "config.toml")
        with open(config) as f:
            text = f.read()
        with open(config, "w") as f:
            f.write(text.replace("steps = 40", "steps = 80", 1))
        r = self.run_ok(["train", "--resume", run], timeout=120)
        lines = [l for l in r.stderr.splitlines() if "schedule now ends at step 80 instead of 40" in l]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("optim.schedule_steps = 40", lines[0])
        with h5py.File(os.path.join(run, "metrics.h5"), "r") as f:
            lr = dict(zip(f["train/step"][()], f["train/lr"][()]))
        self.assertGreater(lr[45], lr[40])  # stretched: the rate went back up, as the line said

        # kept: optim.schedule_steps = 40 holds the old schedule, then its floor (0 for cosine)
        kept = self.train("kept", **{"train.steps": "40", "optim.warmup": "5"})
        config = os.path.join(kept, "config.toml")
        with open(config) as f:
            text = f.read()
        with open(config, "w") as f:
            f.write(text.replace("steps = 40", "steps = 60", 1).replace("schedule_steps = 0", "schedule_steps = 40", 1))
        r = self.run_ok(["train", "--resume", kept], timeout=120)
        self.assertNotIn("schedule now ends", r.stderr)
        with h5py.File(os.path.join(kept, "metrics.h5"), "r") as f:
            lr = dict(zip(f["train/step"][()], f["train/lr"][()]))
        self.assertEqual(lr[45], 0.0)

    def test_min_lr_is_the_decay_floor(self):
        """optim.min_lr: the cosine decay ends there and stays; every rate between it and optim.lr after warm-up."""
        run = self.train("floor", **{"train.steps": "40", "optim.warmup": "5", "optim.schedule_steps": "30",
                                     "optim.lr": "0.002", "optim.min_lr": "0.0005"})
        with h5py.File(os.path.join(run, "metrics.h5"), "r") as f:
            lr = dict(zip(f["train/step"][()], f["train/lr"][()]))
        self.assertEqual(lr[35], 0.0005)
        self.assertEqual(lr[40], 0.0005)
        for step in (10, 15, 20, 25):  # rates of steps 9, 14, ... (a row logs the rate its step used)
            self.assertTrue(0.0005 < lr[step] < 0.002, (step, lr[step]))
            expected = 0.0005 + 0.0015 * 0.5 * (1 + math.cos(math.pi * (step - 1 - 5) / 25))
            self.assertAlmostEqual(lr[step], expected, places=12)


if __name__ == "__main__":
    cc.main()
