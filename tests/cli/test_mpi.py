"""Data-parallel training under mpirun (Open MPI): `mpirun -np N attnlab train`.

- train.reduce = "deterministic": N = 1 (no mpirun), 2 and 4 log the same losses
  and evaluations and end with the same parameters, bit for bit; a run
  checkpointed at N = 2 resumes at N = 1 and at N = 4 to the same bits.
- train.reduce = "fast": N = 2 follows the single process within float tolerance.
- Only rank 0 writes: one run folder, the files a single process writes, one
  "writing" line.
- A rank killed mid-run ends the whole job with a message; the run resumes.
- Bad rank counts (a batch they do not split, a deterministic N that is not a
  power of two) and a launcher whose rank count MPI does not see: one line, exit 2.

    /usr/bin/python3 tests/cli/test_mpi.py ATTNLAB_BINARY REPO_ROOT
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import h5py
import numpy as np

import cli_common as cc

# Open MPI as root, more ranks than cores, no core binding, and the shared-memory
# transport without the cross-process copy that containers often forbid.
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "--mca", "btl", "self,vader", "--mca", "btl_vader_single_copy_mechanism", "none"]

CONFIG = dict(cc.TINY, **{
    "model.width": "16", "model.layers": "2", "train.batch": "16", "train.steps": "20",
    "train.log_every": "2", "train.eval_every": "5", "train.checkpoint_every": "10",
    "train.keep_checkpoints": "0", "train.eval_batches": "3", "model.dropout": "0.1",
    "optim.warmup": "5",
})
DETERMINISTIC = dict(CONFIG, **{"train.reduce": "deterministic", "train.micro_batches": "4"})
SERIES = ["train/loss", "train/grad_norm", "train/lr", "eval/loss", "eval/token_acc", "eval/seq_acc"]


def train(ranks, args, cwd, timeout=180):
    cmd = ([] if ranks == 1 else MPIRUN + ["-np", str(ranks)]) + [cc.ATTNLAB, "train"] + list(args)
    return subprocess.run(cmd, cwd=cwd, env=cc.env(), capture_output=True, text=True, timeout=timeout)


def series(run_dir):
    with cc.open_metrics(os.path.join(run_dir, "metrics.h5")) as f:
        return {name: f[name][()] for name in SERIES}


def params(run_dir, step):
    with h5py.File(cc.checkpoint_path(run_dir, step), "r") as f:
        return {name: f["params"][name][()] for name in f["params"]}


def run_files(run_dir):
    return sorted(os.path.relpath(os.path.join(d, n), run_dir) for d, _, names in os.walk(run_dir) for n in names)


class Mpi(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="attnlab_cli_mpi_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_ok(self, ranks, config, name, extra=()):
        out = os.path.join(self.tmp, "runs")
        p = train(ranks, cc.overrides(config, run__out_dir=out, run__name=name) + list(extra), self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        return os.path.join(out, name), p

    def assert_same_bits(self, a, b, step):
        sa, sb = series(a), series(b)
        for name in SERIES:
            np.testing.assert_array_equal(sa[name], sb[name], err_msg=name)
        pa, pb = params(a, step), params(b, step)
        self.assertEqual(sorted(pa), sorted(pb))
        for name in pa:
            self.assertEqual(pa[name].tobytes(), pb[name].tobytes(), name)

    def test_deterministic_same_bits_at_1_2_and_4_ranks(self):
        one, _ = self.run_ok(1, DETERMINISTIC, "n1")
        two, _ = self.run_ok(2, DETERMINISTIC, "n2")
        four, _ = self.run_ok(4, DETERMINISTIC, "n4")
        self.assert_same_bits(one, two, 20)
        self.assert_same_bits(one, four, 20)
        # and it trains: the loss falls
        losses = series(one)["train/loss"]
        self.assertLess(losses[-1], losses[0])

    def test_deterministic_encoder_decoder(self):
        config = dict(DETERMINISTIC, **{"task.name": "translate", "model.kind": "encoder-decoder", "model.layers": "1"})
        one, _ = self.run_ok(1, config, "ed1")
        four, _ = self.run_ok(4, config, "ed4")
        self.assert_same_bits(one, four, 20)

    def test_deterministic_resume_at_another_rank_count(self):
        whole, _ = self.run_ok(1, DETERMINISTIC, "whole")
        cut, _ = self.run_ok(2, DETERMINISTIC, "cut")
        for ranks in (1, 4):  # the N = 2 run from its step-10 checkpoint
            copy = os.path.join(self.tmp, f"resumed_at_{ranks}")
            shutil.copytree(cut, copy)
            os.remove(cc.checkpoint_path(copy, 20))
            os.remove(os.path.join(copy, "summary.json"))
            p = train(ranks, ["--resume", copy], self.tmp)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("from step 10", p.stderr)
            self.assert_same_bits(whole, copy, 20)

    def test_fast_within_tolerance_of_one_process(self):
        # without dropout: at N > 1 each rank's rows draw their masks from a stream of their own
        config = dict(CONFIG, **{"model.dropout": "0"})
        one, _ = self.run_ok(1, config, "fast1")
        two, _ = self.run_ok(2, config, "fast2")
        s1, s2 = series(one), series(two)
        np.testing.assert_array_equal(s1["train/lr"], s2["train/lr"])
        # float32 sums in another order: measured 2e-7 relative over 20 steps, 3.4e-7 over 200
        np.testing.assert_allclose(s1["train/loss"], s2["train/loss"], rtol=1e-5)
        np.testing.assert_allclose(s1["eval/loss"], s2["eval/loss"], rtol=1e-5)
        # Parameters: within 1e-3. Those whose true gradient is 0 (the key bias: softmax
        # ignores a shift shared by all keys) move by Adam's normalised rounding noise
        # (1e-4 after 20 steps, 6e-4 after 200), the others agree to 2.4e-7 (200 steps).
        p1, p2 = params(one, 20), params(two, 20)
        for name in p1:
            np.testing.assert_allclose(p1[name], p2[name], rtol=1e-3, atol=1e-3, err_msg=name)

    def test_only_rank_zero_writes(self):
        single, _ = self.run_ok(1, CONFIG, "single")
        four, p = self.run_ok(4, CONFIG, "four", ["train.tensorboard=true"])
        self.assertEqual(sorted(os.listdir(os.path.dirname(four))), ["four", "single"])
        single_files = run_files(single)
        self.assertEqual([f for f in run_files(four) if not f.startswith("tb/")], single_files)
        self.assertEqual(p.stderr.count("attnlab train: writing"), 1, p.stderr)
        self.assertEqual(p.stdout.count("run "), 1, p.stdout)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["runs"])  # nothing in the working directory

    def test_killed_rank_ends_the_job_and_the_run_resumes(self):
        out = os.path.join(self.tmp, "runs")
        config = dict(CONFIG, **{"train.steps": "100000", "train.checkpoint_every": "20", "train.keep_checkpoints": "2"})
        log = open(os.path.join(self.tmp, "mpirun.log"), "w")
        proc = subprocess.Popen(MPIRUN + ["-np", "2", cc.ATTNLAB, "train"] +
                                cc.overrides(config, run__out_dir=out, run__name="killed"),
                                cwd=self.tmp, env=cc.env(), stdout=log, stderr=subprocess.STDOUT)
        run_dir = os.path.join(out, "killed")
        cc.wait_for(lambda: len(cc.checkpoint_steps(run_dir)) >= 1 if os.path.isdir(run_dir) else False, proc, timeout=120)
        os.kill(rank_pid(proc.pid, 1), signal.SIGKILL)
        proc.wait(timeout=60)
        log.close()
        self.assertNotEqual(proc.returncode, 0)
        with open(os.path.join(self.tmp, "mpirun.log")) as f:
            said = f.read()
        self.assertRegex(said, r"(?i)signal 9|killed")
        # the run goes on from its newest checkpoint, now to a near end
        with open(os.path.join(run_dir, "config.toml")) as f:
            text = f.read()
        newest = cc.checkpoint_steps(run_dir)[-1]
        with open(os.path.join(run_dir, "config.toml"), "w") as f:
            f.write(text.replace("steps = 100000", f"steps = {newest + 10}"))
        p = train(2, ["--resume", run_dir], self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"from step {newest}", p.stderr)
        self.assertTrue(os.path.exists(os.path.join(run_dir, "summary.json")))

    def refused(self, ranks, config, wants, env_extra=None):
        out = os.path.join(self.tmp, "runs")
        cmd = ([] if ranks == 1 else MPIRUN + ["-np", str(ranks)]) + [cc.ATTNLAB, "train"] + \
            cc.overrides(config, run__out_dir=out, run__name="refused")
        p = subprocess.run(cmd, cwd=self.tmp, env=dict(cc.env(), **(env_extra or {})), capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 2, p.stderr)
        ours = [line for line in p.stderr.splitlines() if line.startswith("attnlab")]
        self.assertEqual(len(ours), 1, p.stderr)
        self.assertIn(wants, ours[0])
        self.assertFalse(os.path.exists(out), "nothing is written")

    def test_batch_the_ranks_do_not_split(self):
        self.refused(3, dict(CONFIG, **{"train.batch": "16"}), "train.batch = 16 cannot be split across 3 ranks")

    def test_deterministic_needs_a_power_of_two_dividing_the_micro_batches(self):
        self.refused(3, dict(DETERMINISTIC, **{"train.micro_batches": "6", "train.batch": "18"}),
                     "power of two dividing train.micro_batches = 6")
        self.refused(4, dict(DETERMINISTIC, **{"train.micro_batches": "2"}), "train.micro_batches = 2")

    def test_micro_batches_must_divide_the_batch(self):
        self.refused(1, dict(DETERMINISTIC, **{"train.micro_batches": "5"}), "does not divide train.batch = 16")

    def test_launcher_ranks_that_mpi_does_not_see(self):
        # As under `srun` without MPI support: the launcher says 2 ranks, MPI starts one.
        self.refused(1, CONFIG, "launched as 2 ranks", {"PMI_SIZE": "2", "PMI_RANK": "0"})

    def test_other_commands_refuse_to_run_as_ranks(self):
        p = subprocess.run(MPIRUN + ["-np", "2", cc.ATTNLAB, "eval", "missing.h5"], cwd=self.tmp, env=cc.env(),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        ours = [line for line in p.stderr.splitlines() if line.startswith("attnlab")]
        self.assertEqual(len(ours), 1, p.stderr)
        self.assertIn("only train and sweep run under mpirun", ours[0])


def rank_pid(mpirun_pid, rank):
    """The pid of rank `rank` among the descendants of mpirun (its environment says its rank)."""
    deadline = time.time() + 30
    while time.time() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if cc.ATTNLAB.encode() in cmdline and f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
                return int(pid)
        time.sleep(0.05)
    raise AssertionError(f"no rank {rank} under mpirun {mpirun_pid}")


if __name__ == "__main__":
    cc.main()
