"""A cell that fails at runtime does not take the others down: a sweep over
"optim.lr" = [1e-3, 1e30] (AdamW moves every weight by about lr at the first
step, so the second cell's loss turns non-finite and its `attnlab train` child
exits with status 1). The sweep finishes the other cell, reports the failing one
in summary.csv / summary.h5 as "failed (exit 1)" and exits with status 1.

    /usr/bin/python3 tests/sweep/test_sweep_failure.py ATTNLAB_BINARY
"""
import math
import os

import h5py
import numpy as np

import sweep_common as sc

SWEEP = [("optim.lr", "[1e-3, 1e30]")]
GOOD, BAD = "0_optim.lr=0.001", "1_optim.lr=1e+30"


class FailingCell(sc.SweepTest):
    def run_failing_sweep(self, **changes):
        # optim.warmup = 0: the full lr at the first step.
        config = self.write_config(sc.config_text(sweep=SWEEP, optim__warmup="0", **changes))
        r = self.sweep(config, "--jobs", "2", expect=None)
        self.dir = self.sweep_dir()
        return r

    def child_exit(self, cell_index):
        """Runs the failing cell's own config (as the sweep wrote it) with plain `attnlab train`."""
        cell_config = os.path.join(self.dir, "cells", f"{cell_index}.toml")
        self.assertTrue(os.path.isfile(cell_config), f"no {cell_config}")
        args = ["train", cell_config, "run.out_dir=" + self.path("direct")]
        r = sc.attnlab(args, self.tmp)
        return r.returncode, sc.shown(args, r)

    def check_failure_contained(self, r, expected_status):
        self.assertEqual(r.returncode, 1, r.shown)
        # The good cell finished as an ordinary run.
        good = os.path.join(self.dir, GOOD)
        for entry in ("config.toml", "metrics.h5", "summary.json"):
            self.assertTrue(os.path.isfile(os.path.join(good, entry)), f"{GOOD}: no {entry}\n{r.shown}")
        summary = sc.read_json(os.path.join(good, "summary.json"))
        self.assertEqual(summary["steps"], 60)
        self.assertTrue(math.isfinite(summary["eval_loss"]), summary)
        # The bad one did not pretend to finish.
        self.assertFalse(os.path.exists(os.path.join(self.dir, BAD, "summary.json")), r.shown)
        self.assertIn(f"sweep: {GOOD}: ok", r.stderr.splitlines(), r.shown)
        self.assertTrue(any(line.startswith(f"sweep: {BAD}: {expected_status}") for line in r.stderr.splitlines()),
                        f"stderr does not report {BAD} as {expected_status!r}\n{r.shown}")
        self.assertIn("1 of 2 cells ok", r.stdout, r.shown)
        # The tables: the good cell's numbers, the bad cell's status.
        _, cells, aggregates = sc.read_summary_csv(os.path.join(self.dir, "summary.csv"))
        self.assertEqual([(c["name"], c["optim.lr"], c["status"]) for c in cells],
                         [(GOOD, "0.001", "ok"), (BAD, "1e+30", expected_status)], r.shown)
        for column in sc.SUMMARY_COLUMNS:
            self.assertTrue(sc.same(sc.csv_number(cells[0][column]), sc.g10(summary[column])), (column, cells[0]))
            self.assertEqual(cells[1][column], "", f"the failed cell has a {column}: {cells[1]}")
        # No seed axis: one aggregate row per cell, n = 1, std 0.
        self.assertEqual([(a["optim.lr"], a["status"], a["n"]) for a in aggregates],
                         [("0.001", "1/1 ok", "1"), ("1e+30", "0/1 ok", "1")])
        self.assertEqual(sc.csv_number(aggregates[0]["eval_loss_std"]), 0.0)
        h5 = sc.read_summary_h5(os.path.join(self.dir, "summary.h5"))
        self.assertEqual(h5["cells"]["name"], [GOOD, BAD])
        self.assertEqual(h5["cells"]["status"], ["ok", expected_status])
        self.assertEqual(h5["cells"]["eval_loss"][0], summary["eval_loss"])
        self.assertTrue(math.isnan(h5["cells"]["eval_loss"][1]), h5["cells"]["eval_loss"])
        # The failing cell's log holds the child's message.
        log = os.path.join(self.dir, "logs", BAD + ".log")
        self.assertTrue(os.path.isfile(log), r.shown)
        self.assertIn(log.replace(self.tmp + os.sep, ""), r.stderr, "stderr does not point at the cell's log")

    def test_nonfinite_cell_fails_alone(self):
        # masked_rows = "zero": the overflowing scores cannot be mistaken for a
        # row with no eligible key, so the child's NaN stop (exit 1) is what fails.
        r = self.run_failing_sweep(model__masked_rows='"zero"')
        code, direct = self.child_exit(1)
        self.assertEqual(code, 1, "the lr = 1e30 cell, run on its own, does not exit 1\n" + direct)
        self.check_failure_contained(r, "failed (exit 1)")
        with open(os.path.join(self.dir, "logs", BAD + ".log")) as f:
            self.assertRegex(f.read(), r"step \d+: .*(NaN|infinite)")

    def test_nonfinite_cell_fails_alone_default_masked_rows(self):
        # The same with the default masked_rows = "error". README: a NaN or
        # infinite loss stops the run with exit status 1, so the cell must read
        # "failed (exit 1)" here too (exit 2 would claim bad input).
        r = self.run_failing_sweep()
        code, direct = self.child_exit(1)
        self.assertEqual(code, 1, "the lr = 1e30 cell, run on its own, does not exit 1\n" + direct)
        self.check_failure_contained(r, "failed (exit 1)")

    def test_failed_cell_masked_mass_is_what_it_logged(self):
        # The table's masked_mass_max of a cell is the largest value in its
        # metrics.h5 (/attention/*/masked_mass_max), empty when it logged no
        # attention row: a failed cell must not read as a clean mask by default.
        r = self.run_failing_sweep(model__masked_rows='"zero"')
        _, cells, _ = sc.read_summary_csv(os.path.join(self.dir, "summary.csv"))
        for row in cells:
            metrics = os.path.join(self.dir, row["name"], "metrics.h5")
            with h5py.File(metrics, "r", libver="latest", swmr=True) as f:
                logged = [f[f"attention/{kind}/masked_mass_max"][()] for kind in f.get("attention", {})]
            values = np.concatenate([x.ravel() for x in logged]) if logged else np.zeros(0)
            expected = "" if values.size == 0 else float(f"{np.nanmax(values):.10g}")
            got = row["masked_mass_max"] if values.size == 0 else sc.csv_number(row["masked_mass_max"])
            self.assertEqual(got, expected, f"{row['name']}: masked_mass_max {row['masked_mass_max']!r}, "
                                            f"its metrics.h5 logged {values.size} values\n{r.shown}")

    def test_rerun_retries_the_failed_cell_only(self):
        r = self.run_failing_sweep(model__masked_rows='"zero"')
        self.assertEqual(r.returncode, 1, r.shown)
        good_state = sc.tree_state(os.path.join(self.dir, GOOD))
        config = "sweep.toml"
        again = self.sweep(config, "--jobs", "2", expect=1)
        lines = again.stderr.splitlines()
        self.assertIn(f"sweep: {GOOD}: finished earlier, skipped", lines, again.shown)
        self.assertTrue(any(line.startswith(f"sweep: {BAD}: failed (exit 1)") for line in lines), again.shown)
        self.assertEqual(sc.tree_state(os.path.join(self.dir, GOOD)), good_state, again.shown)


if __name__ == "__main__":
    sc.main()
