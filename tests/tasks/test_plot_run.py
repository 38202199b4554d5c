#!/usr/bin/python3
"""tools/plot_run.py on real runs: after training, during training, and on bad input.

    /usr/bin/python3 tests/tasks/test_plot_run.py ATTNLAB_BINARY REPO_ROOT [unittest args]

Plain unittest (Debian's python3 with h5py and matplotlib). Each test trains a
tiny run (width 16, a few hundred steps at most, well under a second of CPU
each) in a temporary directory and runs the plot script on it as a user would.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import h5py

ATTNLAB = None  # the attnlab binary (argv[1])
PLOT = None     # tools/plot_run.py (from argv[2], the repository root)

TINY = ["task.vocab=10", "task.min_len=2", "task.max_len=4", "model.width=16", "model.heads=2",
        "model.layers=2", "model.ffn=0", "train.batch=8", "train.log_every=10", "train.eval_every=20",
        "train.checkpoint_every=1000", "train.threads=1", "run.out_dir=out"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def train(folder, task, steps, *extra, wait=True):
    args = [ATTNLAB, "train", f"task.name={task}", f"run.name={task}", f"train.steps={steps}"] + TINY + list(extra)
    if not wait:
        return subprocess.Popen(args, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = subprocess.run(args, cwd=folder, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit status {done.returncode}\n{done.stderr[-2000:]}")
    return os.path.join(folder, "out", task)


def plot(*args):
    return subprocess.run([sys.executable, PLOT] + list(args), capture_output=True, text=True, timeout=120)


class PlotRun(unittest.TestCase):
    def assert_pngs(self, folder, names):
        self.assertEqual(sorted(os.listdir(folder)), sorted(names))  # no temporary files left behind
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                data = f.read()
            self.assertTrue(data.startswith(PNG_SIGNATURE), name)
            self.assertGreater(len(data), 10000, name)

    def test_decoder_run_after_training(self):
        with tempfile.TemporaryDirectory(prefix="attnlab_plot_") as folder:
            run = train(folder, "copy", 60)
            done = plot(run)  # default output folder: RUN_DIR/plots
            self.assertEqual(done.returncode, 0, done.stderr)
            out = os.path.join(run, "plots")
            expected = ["loss_acc.png", "attention_self.png", "overview.png"]
            self.assertEqual(done.stdout.split(), [os.path.join(out, n) for n in expected])
            self.assert_pngs(out, expected)

    def test_encoder_decoder_run_has_three_attention_kinds(self):
        with tempfile.TemporaryDirectory(prefix="attnlab_plot_") as folder:
            run = train(folder, "translate", 40, "model.kind=encoder-decoder")
            out = os.path.join(folder, "pngs")
            done = plot(os.path.join(run, "metrics.h5"), "--out", out)  # the log file itself also works
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assert_pngs(out, ["loss_acc.png", "attention_enc_self.png", "attention_dec_self.png",
                                   "attention_cross.png", "overview.png"])

    def test_while_training(self):
        with tempfile.TemporaryDirectory(prefix="attnlab_plot_") as folder:
            process = train(folder, "copy", 1000000, wait=False)  # stopped below
            metrics = os.path.join(folder, "out", "copy", "metrics.h5")
            try:
                rows, deadline = 0, time.monotonic() + 60
                while rows < 2 and time.monotonic() < deadline and process.poll() is None:
                    time.sleep(0.1)
                    if os.path.exists(metrics):
                        try:
                            with h5py.File(metrics, "r", libver="latest", swmr=True) as f:
                                rows = len(f["train/step"])
                        except (OSError, KeyError):
                            pass  # not yet a complete SWMR file
                self.assertGreaterEqual(rows, 2, "the run logged nothing within a minute")
                done = plot(os.path.join(folder, "out", "copy"), "--out", os.path.join(folder, "pngs"))
                self.assertIsNone(process.poll(), "the run stopped before the plot finished")
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assert_pngs(os.path.join(folder, "pngs"), ["loss_acc.png", "attention_self.png", "overview.png"])
            finally:
                if process.poll() is None:
                    process.terminate()  # the trainer checkpoints and exits 130 on SIGTERM
                self.assertEqual(process.wait(timeout=60), 130)

    def test_missing_run_is_one_line_and_status_2(self):
        with tempfile.TemporaryDirectory(prefix="attnlab_plot_") as folder:
            missing = os.path.join(folder, "no_run")
            done = plot(missing)
            self.assertEqual(done.returncode, 2)
            self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
            self.assertIn(os.path.join(missing, "metrics.h5"), done.stderr)
            not_hdf5 = os.path.join(folder, "metrics.h5")
            with open(not_hdf5, "w") as f:
                f.write("not HDF5\n")
            done = plot(not_hdf5)
            self.assertEqual(done.returncode, 2)
            self.assertIn(not_hdf5, done.stderr)
            self.assertFalse(os.path.exists(os.path.join(folder, "plots")))

    def test_files_that_crash_or_hang_libhdf5_are_one_line(self):
        # read in a child first (tools/h5_probe.py): a crash or a hang there is one line naming the file
        crafted = sorted(glob.glob(os.path.join(os.path.dirname(PLOT), "..", "tests", "fuzz", "libhdf5_crashes", "*.h5")))
        self.assertEqual(len(crafted), 3, crafted)
        env = dict(os.environ, ATTNLAB_H5_PROBE_SECONDS="2")
        with tempfile.TemporaryDirectory(prefix="attnlab_plot_") as folder:
            for source in crafted:
                metrics = os.path.join(folder, "metrics.h5")
                shutil.copyfile(source, metrics)
                done = subprocess.run([sys.executable, PLOT, metrics], capture_output=True, text=True, timeout=60, env=env)
                self.assertEqual(done.returncode, 2, f"{source}\n{done.stderr}")
                self.assertEqual(len(done.stderr.strip().splitlines()), 1, f"{source}\n{done.stderr}")
                self.assertIn(metrics, done.stderr)
                self.assertFalse(os.path.exists(os.path.join(folder, "plots")))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: test_plot_run.py ATTNLAB_BINARY REPO_ROOT [unittest args]")
    ATTNLAB = os.path.abspath(sys.argv.pop(1))
    PLOT = os.path.join(os.path.abspath(sys.argv.pop(1)), "tools", "plot_run.py")
    unittest.main()
