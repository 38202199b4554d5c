"""`attnlab sweep --seeds-together`: the cells that differ only in run.seed train
side by side in one `attnlab train --runs` process each, and each cell's folder
is what the plain sweep writes for it: the same metrics.h5 series bit for bit
(wall time and throughput aside), the same final parameters and optimiser state,
the same row of summary.csv. A group's cells are claimed and reported one by one
(their own status lines and rows), a rerun resumes the unfinished members side
by side and starts the missing ones beside them, a signal stops every member
with a checkpoint, the cores are split between the groups that can run at once
(not the cells), and bad option values are refused in one line, exit 2.

    /usr/bin/python3 tests/sweep/test_sweep_seeds.py ATTNLAB_BINARY
"""
import os
import re
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np

import sweep_common as sc

SWEEP = [("model.heads", "[1, 2]"), ("run.seed", "[0, 1, 2]")]
NAMES = ["0_model.heads=1,run.seed=0", "1_model.heads=1,run.seed=1", "2_model.heads=1,run.seed=2",
         "3_model.heads=2,run.seed=0", "4_model.heads=2,run.seed=1", "5_model.heads=2,run.seed=2"]
ONE_THREAD = dict(train__threads="1")  # a plain cell's thread count, and each member's
TIME_COLUMNS = ("wall", "tokens_per_s")


def datasets(path):
    with h5py.File(path, "r") as f:
        out = {}
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def read_text(path):
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read()


def newest_checkpoint(cell):
    folder = os.path.join(cell, "checkpoints")
    return os.path.join(folder, sorted(n for n in os.listdir(folder) if n.endswith(".h5"))[-1])


class SeedsTogether(sc.SweepTest):
    def assert_same_cells(self, ours, theirs, names=NAMES):
        for name in names:
            a, b = os.path.join(ours, name), os.path.join(theirs, name)
            mine, plain = datasets(os.path.join(a, "metrics.h5")), datasets(os.path.join(b, "metrics.h5"))
            self.assertEqual(sorted(mine), sorted(plain), name)
            for key, value in plain.items():
                if not any(t in key for t in TIME_COLUMNS):
                    np.testing.assert_array_equal(mine[key], value, err_msg=f"{name}: metrics.h5 {key}")
            mine, plain = datasets(newest_checkpoint(a)), datasets(newest_checkpoint(b))
            self.assertEqual(sorted(mine), sorted(plain), name)
            for key, value in plain.items():
                if key.startswith("params/") or key.startswith("optimizer/"):
                    np.testing.assert_array_equal(mine[key], value, err_msg=f"{name}: checkpoint {key}")
            with open(os.path.join(a, "config.toml")) as f, open(os.path.join(b, "config.toml")) as g:
                self.assertEqual(f.read().replace(os.path.relpath(ours, self.tmp), "X"),
                                 g.read().replace(os.path.relpath(theirs, self.tmp), "X"), name)

    def assert_same_tables(self, ours, theirs):
        _, mine, _ = sc.read_summary_csv(os.path.join(ours, "summary.csv"))
        _, plain, _ = sc.read_summary_csv(os.path.join(theirs, "summary.csv"))
        for a, b in zip(mine, plain, strict=True):
            self.assertEqual({k: v for k, v in a.items() if k not in ("wall_s", "tokens_per_s")},
                             {k: v for k, v in b.items() if k not in ("wall_s", "tokens_per_s")})

    def plain_sweep(self, **changes):
        config = self.write_config(sc.config_text(sweep=SWEEP, run__name='"plain"', **dict(ONE_THREAD, **changes)), "plain.toml")
        self.sweep(config, "--jobs", "2")
        return self.sweep_dir("plain")

    def test_groups_write_what_the_plain_sweep_writes(self):
        plain = self.plain_sweep()
        for mode in ("threads", "stacked"):
            config = self.write_config(sc.config_text(sweep=SWEEP, run__name=f'"{mode}"', **ONE_THREAD), f"{mode}.toml")
            r = self.sweep(config, "--jobs", "2", f"--seeds-together={mode}")
            ours = self.sweep_dir(mode)
            lines = r.stderr.splitlines()
            for name in NAMES:
                self.assertIn(f"sweep: {name}: starting", lines, r.shown)
                self.assertIn(f"sweep: {name}: ok", lines, r.shown)
            for first in (0, 3):  # two processes, three members each
                with open(os.path.join(ours, "logs", f"together_{first}.log")) as f:
                    self.assertIn(f"3 runs side by side ({mode})", f.read(), r.shown)
                with open(os.path.join(ours, "logs", NAMES[first + 1] + ".log")) as f:
                    self.assertIn(f"together_{first}.log", f.read(), r.shown)
            self.assertIn("6 of 6 cells ok", r.stdout, r.shown)
            self.assert_same_cells(ours, plain)
            self.assert_same_tables(ours, plain)

    def test_rerun_resumes_and_starts_members_side_by_side(self):
        config = self.write_config(sc.config_text(sweep=SWEEP, **ONE_THREAD))
        self.sweep(config, "--jobs", "2", "--seeds-together")
        ours = self.sweep_dir()
        before = {n: sc.tree_state(os.path.join(ours, n)) for n in NAMES}
        os.remove(os.path.join(ours, NAMES[1], "summary.json"))  # resumed from its last checkpoint
        shutil.rmtree(os.path.join(ours, NAMES[2]))  # started again
        r = self.sweep(config, "--jobs", "2", "--seeds-together")
        lines = r.stderr.splitlines()
        self.assertIn(f"sweep: {NAMES[0]}: finished earlier, skipped", lines, r.shown)
        self.assertIn(f"sweep: {NAMES[1]}: resuming", lines, r.shown)
        self.assertIn(f"sweep: {NAMES[2]}: starting", lines, r.shown)
        self.assertIn("sweep: 2 cells side by side in one process (threads), output in out/tiny/logs/together_1.log", lines, r.shown)
        for name in NAMES[3:]:
            self.assertIn(f"sweep: {name}: finished earlier, skipped", lines, r.shown)
            self.assertEqual(sc.tree_state(os.path.join(ours, name)), before[name], name)
        with open(os.path.join(ours, "cells", "together_1.toml")) as f:
            runs = f.read()
        self.assertIn(f"resume = 'out/tiny/{NAMES[1]}'", runs)
        self.assertIn(f"dir = 'out/tiny/{NAMES[2]}'", runs)
        plain = self.plain_sweep()
        self.assert_same_cells(ours, plain)
        self.assertIn("6 of 6 cells ok", r.stdout, r.shown)

    def test_failed_members_are_reported_each(self):
        config = self.write_config(sc.config_text(sweep=SWEEP, optim__lr="1e30", optim__clip="0", **ONE_THREAD))
        r = self.sweep(config, "--jobs", "1", "--seeds-together", expect=1)
        lines = r.stderr.splitlines()
        for i, name in enumerate(NAMES):
            log = f"out/tiny/logs/together_{0 if i < 3 else 3}.log"
            self.assertIn(f"sweep: {name}: failed (exit 1), see {log}", lines, r.shown)
        _, rows, _ = sc.read_summary_csv(os.path.join(self.sweep_dir(), "summary.csv"))
        self.assertEqual([row["status"] for row in rows], ["failed (exit 1)"] * 6, r.shown)

    def test_a_signal_stops_every_member_and_the_rerun_finishes_them(self):
        steps = 4000
        config = self.write_config(sc.config_text(sweep=[("run.seed", "[0, 1]")], train__steps=str(steps), train__eval_every="1000",
                                                  train__checkpoint_every="1000", **ONE_THREAD))
        names = ["0_run.seed=0", "1_run.seed=1"]
        proc = subprocess.Popen([sc.ATTNLAB, "sweep", config, "--seeds-together"], cwd=self.tmp, env=sc.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        log = os.path.join(self.sweep_dir(), "logs", "together_0.log")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:  # each member has logged a step: its loop runs
            text = read_text(log)
            if all(re.search(rf"^{re.escape(n)}: step \d+/{steps} ", text, re.MULTILINE) for n in names):
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        shown = f"exit {proc.returncode}\n{out}\n{err}"
        self.assertEqual(proc.returncode, 130, shown)
        for name in names:
            self.assertIn(f"sweep: {name}: interrupted", err.splitlines(), shown)
            cell = os.path.join(self.sweep_dir(), name)
            self.assertFalse(os.path.exists(os.path.join(cell, "summary.json")), shown)
            self.assertTrue(os.listdir(os.path.join(cell, "checkpoints")), shown)
        self.assertIn("interrupted at step", read_text(log), shown)
        r = self.sweep(config, "--seeds-together")
        for name in names:
            self.assertIn(f"sweep: {name}: resuming", r.stderr.splitlines(), r.shown)
            self.assertEqual(sc.read_json(os.path.join(self.sweep_dir(), name, "summary.json"))["steps"], steps, r.shown)

    def test_the_cores_are_split_between_the_groups_that_run_at_once(self):
        cores = len(os.sched_getaffinity(0))
        for grid, extra, threads in (([("run.seed", "[0, 1, 2]")], ["--seeds-together"], cores),  # one group: every core
                                     ([("run.seed", "[0, 1, 2]")], [], max(1, cores // 2)),  # three cells, two at a time
                                     (SWEEP, ["--seeds-together"], max(1, cores // 2))):  # two groups at once
            with self.subTest(grid=grid, extra=extra):
                name = f"g{len(grid)}{len(extra)}"
                config = self.write_config(sc.config_text(sweep=grid, run__name=f'"{name}"', train__steps="5"), name + ".toml")
                self.sweep(config, "--jobs", "2", *extra)
                with open(os.path.join(self.sweep_dir(name), "0_run.seed=0" if len(grid) == 1 else NAMES[0], "config.toml")) as f:
                    self.assertIn(f"threads = {threads}\n", f.read())

    def test_a_grid_without_seeds_runs_its_cells_alone(self):
        config = self.write_config(sc.config_text(sweep=[("model.heads", "[1, 2]")], train__steps="5"))
        r = self.sweep(config, "--jobs", "2", "--seeds-together")
        self.assertNotIn("side by side", r.stderr, r.shown)
        self.assertEqual(sorted(os.listdir(os.path.join(self.sweep_dir(), "logs"))), ["0_model.heads=1.log", "1_model.heads=2.log"])
        self.assertIn("2 of 2 cells ok", r.stdout, r.shown)

    def test_bad_option_values_are_refused(self):
        config = self.write_config(sc.config_text(sweep=SWEEP))
        for extra, says in ((["--seeds-together=sideways"], "--seeds-together=sideways: \"threads\" (the default) or \"stacked\""),
                            (["--seeds-together", "--cell", "0"], "not with --cell (a group alone: --group K)"),
                            (["--group", "0"], "--group K runs a seed group of --seeds-together"),
                            (["--seeds-together", "--group", "0", "--slurm"], "give one of them")):
            r = self.sweep(config, *extra, expect=2)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.shown)
            self.assertIn(says, r.stderr, r.shown)
            self.assertFalse(os.path.exists(self.path("out")), r.shown)


if __name__ == "__main__":
    sc.main()
