"""What a sweep writes where: without run.name a sweep is named after its
config file (never runs/default, the single runs' folder); cell folder names
that would pass the filesystem's limit are cut deterministically (index, the
assignments cut short, "~" and a hash), and the cell's config.toml keeps every
value; a rerun with another --jobs continues the same sweep.

    /usr/bin/python3 tests/sweep/test_sweep_reliability.py ATTNLAB_BINARY
"""
import os
import re
import tomllib

import sweep_common as sc

MAX_FOLDER_NAME = 240  # kMaxFolderName, experiments/files/run_files.h

# Ten axes whose names and values add up to well over 240 bytes per cell name.
LONG = [("optim.lr", "[0.0012345678901234567, 0.0012345678901234999]"),
        ("optim.betas", "[[0.91234567890123456, 0.98123456789012345]]"),
        ("optim.eps", "[1.2345678901234567e-8]"),
        ("optim.weight_decay", "[0.012345678901234567]"),
        ("optim.clip", "[1.2345678901234567]"),
        ("train.target_accuracy", "[0.91234567890123456]"),
        ("model.positional", '["sinusoidal"]'),
        ("model.masked_rows", '["zero"]'),
        ("optim.schedule", '["constant"]'),
        ("model.activation", '["relu"]')]


def cell_folders(sweep_dir):
    return sorted(n for n in os.listdir(sweep_dir) if os.path.isdir(os.path.join(sweep_dir, n)) and n[0].isdigit())


class Reliability(sc.SweepTest):
    def test_default_name_from_the_config_file(self):
        single = self.write_config(sc.config_text(run__name=None), "single.toml")
        r = sc.attnlab(["train", single], self.tmp)
        self.assertEqual(r.returncode, 0, sc.shown(["train", single], r))
        before = sc.tree_state(self.path("out", "default"))
        config = self.write_config(sc.config_text(sweep=[("model.heads", "[1, 2]")], run__name=None), "grid.toml")
        r = self.sweep(config)
        self.assertEqual(sc.tree_state(self.path("out", "default")), before, "the single run in out/default changed\n" + r.shown)
        self.assertTrue(os.path.isfile(self.path("out", "grid", "sweep.toml")), r.shown)
        self.assertEqual(cell_folders(self.path("out", "grid")), ["0_model.heads=1", "1_model.heads=2"], r.shown)
        self.assertIn("summary in out/grid/summary.csv", r.stdout, r.shown)
        with open(self.path("out", "grid", "sweep.toml"), "rb") as f:
            self.assertEqual(tomllib.load(f)["run"]["name"], "grid")
        # and a rerun finds it again
        again = self.sweep(config)
        self.assertEqual(again.stderr.count("finished earlier, skipped"), 2, again.shown)

    def test_long_cell_names_are_cut_deterministically(self):
        config = self.write_config(sc.config_text(sweep=LONG, run__name='"long"'))
        r = self.sweep(config, "--jobs", "2")
        sweep_dir = self.sweep_dir("long")
        names = cell_folders(sweep_dir)
        self.assertEqual(len(names), 2, r.shown)
        for i, name in enumerate(names):
            self.assertLessEqual(len(name.encode()), MAX_FOLDER_NAME, name)
            self.assertTrue(name.startswith(f"{i}_optim.lr=0.001234567890123"), name)
            self.assertRegex(name, r"~[0-9a-f]{16}$")
            # every value is in the cell's own config
            with open(os.path.join(sweep_dir, name, "config.toml"), "rb") as f:
                cell = tomllib.load(f)
            self.assertEqual(cell["optim"]["lr"], [0.0012345678901234567, 0.0012345678901234999][i])
            self.assertEqual(cell["optim"]["betas"], [0.91234567890123456, 0.98123456789012345])
            self.assertEqual(cell["model"]["activation"], "relu")
            self.assertEqual(cell["train"]["target_accuracy"], 0.91234567890123456)
            self.assertTrue(os.path.isfile(os.path.join(sweep_dir, name, "summary.json")), r.shown)
            self.assertTrue(os.path.isfile(os.path.join(sweep_dir, "logs", name + ".log")), r.shown)
        self.assertNotEqual(names[0][-16:], names[1][-16:])
        _, cells, _ = sc.read_summary_csv(os.path.join(sweep_dir, "summary.csv"))
        self.assertEqual([c["name"] for c in cells], names)
        self.assertEqual([c["status"] for c in cells], ["ok", "ok"])
        # The same names on a rerun: every cell is found and skipped.
        again = self.sweep(config, "--jobs", "2")
        for name in names:
            self.assertIn(f"sweep: {name}: finished earlier, skipped", again.stderr.splitlines(), again.shown)
        self.assertEqual(cell_folders(sweep_dir), names)

    def test_rerun_with_other_jobs_continues(self):
        config = self.write_config(sc.config_text(sweep=[("model.heads", "[1, 2]")]))
        self.sweep(config, "--jobs", "2")
        cell = os.path.join(self.sweep_dir(), "1_model.heads=2")
        os.remove(os.path.join(cell, "summary.json"))
        for name in os.listdir(os.path.join(cell, "checkpoints")):
            if not name.endswith("0000030.h5"):
                os.remove(os.path.join(cell, "checkpoints", name))
        r = self.sweep(config, "--jobs", "1")
        self.assertIn("sweep: 1_model.heads=2: resuming", r.stderr.splitlines(), r.shown)
        self.assertEqual(sc.read_json(os.path.join(cell, "summary.json"))["steps"], 60)

    def test_leftovers_of_a_cell_that_never_checkpointed_are_replaced(self):
        config = self.write_config(sc.config_text(sweep=[("model.heads", "[1, 2]")]))
        self.sweep(config)
        cell = os.path.join(self.sweep_dir(), "0_model.heads=1")
        for name in ("summary.json", "metrics.h5"):
            os.remove(os.path.join(cell, name))
        for name in os.listdir(os.path.join(cell, "checkpoints")):
            os.rename(os.path.join(cell, "checkpoints", name), os.path.join(cell, "checkpoints", name + ".tmp"))
        r = self.sweep(config)
        self.assertIn("sweep: 0_model.heads=1: starting", r.stderr.splitlines(), r.shown)
        self.assertTrue(re.search(r"step_0000060\.h5", " ".join(os.listdir(os.path.join(cell, "checkpoints")))), r.shown)
        self.assertFalse(any(n.endswith(".tmp") for n in os.listdir(os.path.join(cell, "checkpoints"))), r.shown)


if __name__ == "__main__":
    sc.main()
