"""Rerunning a sweep: finished cells (summary.json present) are skipped and left
untouched, the tables are rewritten with the same values; a cell with
checkpoints but no summary.json is resumed (and only that one); a cell with
neither starts again from scratch.

    /usr/bin/python3 tests/sweep/test_sweep_rerun.py ATTNLAB_BINARY
"""
import os
import shutil

import h5py
import numpy as np

import sweep_common as sc

SWEEP = [("model.heads", "[1, 2]"), ("run.seed", "[0, 1]")]
NAMES = ["0_model.heads=1,run.seed=0", "1_model.heads=1,run.seed=1",
         "2_model.heads=2,run.seed=0", "3_model.heads=2,run.seed=1"]


def cell_states(sweep_dir):
    return {name: sc.tree_state(os.path.join(sweep_dir, name)) for name in NAMES}


def train_series(cell):
    with h5py.File(os.path.join(cell, "metrics.h5"), "r", libver="latest", swmr=True) as f:
        return f["train/step"][()].tolist(), f["train/loss"][()].tolist(), f["eval/loss"][()].tolist()


class Rerun(sc.SweepTest):
    def setUp(self):
        super().setUp()
        self.config = self.write_config(sc.config_text(sweep=SWEEP))
        self.first = self.sweep(self.config, "--jobs", "2")
        self.dir = self.sweep_dir()
        self.before = cell_states(self.dir)
        self.summaries = {n: sc.read_json(os.path.join(self.dir, n, "summary.json")) for n in NAMES}
        self.series = {n: train_series(os.path.join(self.dir, n)) for n in NAMES}
        with open(os.path.join(self.dir, "summary.csv")) as f:
            self.csv_before = f.read()
        self.h5_before = sc.read_summary_h5(os.path.join(self.dir, "summary.h5"))
        self.table_stat = {t: os.stat(os.path.join(self.dir, t)) for t in ("summary.csv", "summary.h5")}

    def cell_line(self, stderr, name):
        lines = [line for line in stderr.splitlines() if line.startswith(f"sweep: {name}: ")]
        self.assertTrue(lines, f"stderr says nothing about {name}:\n{stderr}")
        return lines

    def assert_unchanged(self, names, shown):
        after = cell_states(self.dir)
        for name in names:
            changed = sorted(k for k in set(self.before[name]) | set(after[name])
                             if self.before[name].get(k) != after[name].get(k))
            self.assertEqual(changed, [], f"{name}: files changed (hash or mtime) by the rerun\n{shown}")

    def assert_table_row_matches(self, name):
        _, cells, _ = sc.read_summary_csv(os.path.join(self.dir, "summary.csv"))
        row = next(r for r in cells if r["name"] == name)
        self.assertEqual(row["status"], "ok", row)
        summary = sc.read_json(os.path.join(self.dir, name, "summary.json"))
        for column in sc.SUMMARY_COLUMNS:
            self.assertTrue(sc.same(sc.csv_number(row[column]), sc.g10(summary[column])),
                            f"{name}: {column}: csv {row[column]!r}, summary.json {summary[column]!r}")
        return row, summary

    def test_rerun_skips_every_cell(self):
        r = self.sweep(self.config, "--jobs", "2")
        for name in NAMES:
            lines = self.cell_line(r.stderr, name)
            self.assertEqual(len(lines), 1, r.shown)
            self.assertIn("skipped", lines[0], r.shown)
        self.assertNotIn("starting", r.stderr, r.shown)
        self.assertNotIn("resuming", r.stderr, r.shown)
        self.assert_unchanged(NAMES, r.shown)
        # The tables are written again, with the same values.
        for table, old in self.table_stat.items():
            new = os.stat(os.path.join(self.dir, table))
            self.assertTrue((new.st_ino, new.st_mtime_ns) != (old.st_ino, old.st_mtime_ns),
                            f"{table} was not rewritten")
        with open(os.path.join(self.dir, "summary.csv")) as f:
            self.assertEqual(f.read(), self.csv_before, "summary.csv changed on a rerun that ran nothing")
        self.assertEqual(sc.h5_differences(sc.read_summary_h5(os.path.join(self.dir, "summary.h5")), self.h5_before), [])
        self.assertIn("4 of 4 cells ok", r.stdout, r.shown)

    def test_rerun_leaves_cell_configs_and_logs_alone(self):
        before = {f: sc.tree_state(os.path.join(self.dir, f)) for f in ("cells", "logs")}
        r = self.sweep(self.config, "--jobs", "2")
        for folder, state in before.items():
            self.assertEqual(sc.tree_state(os.path.join(self.dir, folder)), state, f"{folder}/ changed\n{r.shown}")

    def test_resume_when_summary_deleted(self):
        target = NAMES[2]
        os.remove(os.path.join(self.dir, target, "summary.json"))
        r = self.sweep(self.config, "--jobs", "2")
        for name in NAMES:
            lines = self.cell_line(r.stderr, name)
            if name == target:
                self.assertIn(f"sweep: {name}: resuming", lines, r.shown)
                self.assertIn(f"sweep: {name}: ok", lines, r.shown)
                self.assertFalse(any("skipped" in line or "starting" in line for line in lines), r.shown)
            else:
                self.assertEqual(len(lines), 1, r.shown)
                self.assertIn("skipped", lines[0], r.shown)
        self.assert_unchanged([n for n in NAMES if n != target], r.shown)
        row, summary = self.assert_table_row_matches(target)
        # Resumed from its final checkpoint: the same model, the same final evaluation.
        self.assertEqual(summary["steps"], 60)
        for key in ("eval_loss", "eval_token_acc", "eval_seq_acc"):
            self.assertEqual(summary[key], self.summaries[target][key], f"{target}: {key} after the resume")
        self.assertIn("4 of 4 cells ok", r.stdout, r.shown)

    def test_resumed_cell_reports_its_throughput(self):
        # A cell resumed at its last checkpoint still trained 60 steps; its
        # tokens_per_s (which the seed aggregates average) must not read 0.
        target = NAMES[2]
        os.remove(os.path.join(self.dir, target, "summary.json"))
        r = self.sweep(self.config, "--jobs", "2")
        row, summary = self.assert_table_row_matches(target)
        self.assertGreater(summary["wall_s"], 0, f"{target}: summary.json {summary}\n{r.shown}")
        self.assertGreater(summary["tokens_per_s"], 0,
                           f"{target}: resumed cell reports tokens_per_s = {summary['tokens_per_s']} "
                           f"(before the resume: {self.summaries[target]['tokens_per_s']})\n{r.shown}")

    def test_resume_from_an_earlier_checkpoint_is_exact(self):
        target = NAMES[1]
        cell = os.path.join(self.dir, target)
        os.remove(os.path.join(cell, "summary.json"))
        os.remove(os.path.join(cell, "checkpoints", "step_0000060.h5"))
        r = self.sweep(self.config, "--jobs", "2")
        self.assertIn(f"sweep: {target}: resuming", r.stderr.splitlines(), r.shown)
        self.assertEqual(sum("resuming" in line or "starting" in line for line in r.stderr.splitlines()), 1, r.shown)
        self.assert_unchanged([n for n in NAMES if n != target], r.shown)
        self.assertTrue(os.path.exists(os.path.join(cell, "checkpoints", "step_0000060.h5")), r.shown)
        _, summary = self.assert_table_row_matches(target)
        # Same thread count (same --jobs), so the continuation is bit for bit.
        self.assertEqual(train_series(cell), self.series[target], f"{target}: the loss series changed\n{r.shown}")
        for key in ("eval_loss", "eval_token_acc", "eval_seq_acc"):
            self.assertEqual(summary[key], self.summaries[target][key], f"{target}: {key} after the resume")

    def test_cell_without_checkpoints_starts_again(self):
        target = NAMES[3]
        cell = os.path.join(self.dir, target)
        os.remove(os.path.join(cell, "summary.json"))
        shutil.rmtree(os.path.join(cell, "checkpoints"))
        r = self.sweep(self.config, "--jobs", "2")
        self.assertIn(f"sweep: {target}: starting", r.stderr.splitlines(), r.shown)
        self.assertNotIn("resuming", r.stderr, r.shown)
        self.assert_unchanged([n for n in NAMES if n != target], r.shown)
        _, summary = self.assert_table_row_matches(target)
        self.assertEqual(train_series(cell), self.series[target], f"{target}: a fresh run differs\n{r.shown}")
        self.assertEqual(summary["eval_loss"], self.summaries[target]["eval_loss"])

    def test_rerun_with_a_changed_config_reports_no_stale_cell(self):
        # The same sweep rerun with train.steps = 90: the finished 60-step cells
        # are no result of this config. Either the sweep refuses (exit 2, one
        # line, nothing changed) or it reruns them; it must not skip them and
        # tabulate the 60-step results as the 90-step sweep's. (train.threads,
        # which follows --jobs, is not part of the comparison.)
        args = ["sweep", self.config, "--jobs", "2", "train.steps=90"]
        r = sc.attnlab(args, self.tmp)
        shown = sc.shown(args, r)
        if r.returncode == 2:
            self.assertEqual(len(r.stderr.splitlines()), 1, shown)
            self.assertIn("train.steps", r.stderr, shown)
            self.assert_unchanged(NAMES, shown)
            return
        self.assertEqual(r.returncode, 0, shown)
        for name in NAMES:
            summary = sc.read_json(os.path.join(self.dir, name, "summary.json"))
            self.assertEqual(summary["steps"], 90, f"{name}: the table reports a 60-step cell for train.steps = 90\n"
                                                   + shown)


if __name__ == "__main__":
    sc.main()
