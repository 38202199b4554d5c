#!/usr/bin/python3
"""Every toy task trains to a documented accuracy on a tiny config.

CTest runs one task per test (label `tasks`):

    /usr/bin/python3 tests/tasks/test_tasks_train.py ATTNLAB_BINARY TaskTrain.test_copy

or all of them: `... test_tasks_train.py ATTNLAB_BINARY` (plain unittest; Debian's
python3 with h5py; no pytest). Each test trains the tiny config below with
`attnlab train` in a temporary directory of its own, then asserts

  - exit status 0 and a summary.json whose eval_token_acc (held-out batches,
    data/tasks.h's counted positions only) is at least the task's threshold;
  - masked mass exactly 0 in every logged attention kind (docs/file_formats.md: a correct
    mask puts no weight on ineligible keys).

The tiny configs share one small model (2 layers, width 48, 4 heads, no
feed-forward, 800 steps of batch 32, AdamW at 5e-3) on short sequences (2 to 5
tokens) and a small vocabulary. Thresholds sit below the lowest accuracy seen
over seeds 0-2 (more for some), measured on the 2-core development VM; the test
uses seed 0. The runs are deterministic for a given build (one thread), so a
failure means a change in the maths, the data or the optimiser, not bad luck.

  task       changes from the shared tiny config     seeds 0 / 1 / 2 (3 / 4)       threshold  CPU s
  copy       -                                       0.998 / 1.000 / 1.000 (1, 1)  0.98       1.8
  reverse    -                                       1.000 / 1.000 / 1.000         0.98       1.8
  sort       ffn = 96                                1.000 / 1.000 / 1.000 (1)     0.98       3.5
  recall     pairs 2-4 (vocab 12 has 4 keys)         1.000 / 1.000 / 1.000         0.98       4.5
  induction  vocab 32 (fewer repeated tokens in r)   0.987 / 0.992 / 0.995 (0.988, 0.988)  0.95  2.6
  translate  encoder-decoder                         1.000 / 1.000 / 1.000         0.98       3.2

About 17 s of CPU in all; ~20 s wall on an idle machine, ~45 s at load 7 on 2 cores.
The full-size configs are in configs/ (each documents its own figures).
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import h5py
import numpy as np

ATTNLAB = None  # the attnlab binary (argv[1])
SEED = 0

# Shared by every task (key=value overrides of the built-in defaults).
TINY = {
    "task.vocab": "12",
    "task.min_len": "2",
    "task.max_len": "5",
    "model.layers": "2",
    "model.width": "48",
    "model.heads": "4",
    "model.ffn": "0",
    "train.steps": "800",
    "train.batch": "32",
    "train.log_every": "50",
    "train.eval_every": "800",
    "train.eval_batches": "8",
    "train.checkpoint_every": "800",
    "train.keep_checkpoints": "1",
    "train.threads": "1",
    "optim.lr": "5e-3",
    "optim.warmup": "50",
}

# task -> (its own overrides, the eval token accuracy it must reach)
TASKS = {
    "copy": ({}, 0.98),
    "reverse": ({}, 0.98),
    "sort": ({"model.ffn": "96"}, 0.98),
    "recall": ({"task.max_len": "4"}, 0.98),
    "induction": ({"task.vocab": "32"}, 0.95),
    "translate": ({"model.kind": "encoder-decoder"}, 0.98),
}


def train(task, folder):
    """Runs the tiny config of `task` in `folder`; returns (summary dict, run dir, seconds)."""
    changes, _ = TASKS[task]
    overrides = dict(TINY, **changes)
    overrides.update({"task.name": task, "run.name": task, "run.seed": str(SEED), "run.out_dir": "out"})
    args = [ATTNLAB, "train"] + [f"{k}={v}" for k, v in overrides.items()]
    start = time.monotonic()
    done = subprocess.run(args, cwd=folder, capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(args)}\nexit status {done.returncode}\n{done.stderr[-2000:]}")
    run_dir = os.path.join(folder, "out", task)
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f), run_dir, seconds


class TaskTrain(unittest.TestCase):
    def check(self, task):
        _, threshold = TASKS[task]
        with tempfile.TemporaryDirectory(prefix=f"attnlab_tasks_{task}_") as folder:
            summary, run_dir, seconds = train(task, folder)
            accuracy = summary["eval_token_acc"]
            print(f"\n{task}: eval token accuracy {accuracy:.4f} (threshold {threshold}), "
                  f"sequence accuracy {summary['eval_seq_acc']:.4f}, {seconds:.1f} s", file=sys.stderr)
            self.assertEqual(summary["steps"], int(TINY["train.steps"]))
            self.assertGreaterEqual(accuracy, threshold,
                                    f"{task}: the tiny config reached eval token accuracy {accuracy:.4f}, "
                                    f"below its documented threshold {threshold} (summary: {summary})")
            with h5py.File(os.path.join(run_dir, "metrics.h5"), "r", libver="latest", swmr=True) as f:
                kinds = list(f["attention"])
                self.assertTrue(kinds, "metrics.h5 has no attention kinds")
                for kind in kinds:
                    worst = float(np.max(f["attention"][kind]["masked_mass_max"][()]))
                    self.assertEqual(worst, 0.0, f"{task}: masked mass {worst} in attention kind {kind}")

    def test_copy(self):
        self.check("copy")

    def test_reverse(self):
        self.check("reverse")

    def test_sort(self):
        self.check("sort")

    def test_recall(self):
        self.check("recall")

    def test_induction(self):
        self.check("induction")

    def test_translate(self):
        self.check("translate")


if __name__ == "__main__":
    if len(sys.argv) < 2 or not os.access(sys.argv[1], os.X_OK):
        sys.exit("usage: test_tasks_train.py ATTNLAB_BINARY [unittest args]")
    ATTNLAB = os.path.abspath(sys.argv.pop(1))
    unittest.main()
