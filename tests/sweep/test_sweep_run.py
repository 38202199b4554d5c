"""A 2 x 2 sweep ("model.heads" = [1, 2], "run.seed" = [0, 1]) run end to end with
--jobs 2: the cell folders (named <index>_<key=value,...>, first axis slowest),
each an ordinary run; summary.csv and summary.h5 agree with the cells' own
summary.json; the aggregates over run.seed are the mean and sample std.

    /usr/bin/python3 tests/sweep/test_sweep_run.py ATTNLAB_BINARY
"""
import math
import os
import statistics
import tomllib

import h5py
import numpy as np

import sweep_common as sc

SWEEP = [("model.heads", "[1, 2]"), ("run.seed", "[0, 1]")]
CELLS = [  # (folder, heads, seed)
    ("0_model.heads=1,run.seed=0", "1", "0"),
    ("1_model.heads=1,run.seed=1", "1", "1"),
    ("2_model.heads=2,run.seed=0", "2", "0"),
    ("3_model.heads=2,run.seed=1", "2", "1"),
]


class TwoByTwo(sc.SweepTest):
    def setUp(self):
        super().setUp()
        self.config = self.write_config(sc.config_text(sweep=SWEEP))
        self.result = self.sweep(self.config, "--jobs", "2")
        self.dir = self.sweep_dir()
        self.summaries = {name: sc.read_json(os.path.join(self.dir, name, "summary.json"))
                          for name, _, _ in CELLS if os.path.exists(os.path.join(self.dir, name, "summary.json"))}

    def test_cell_folders_are_ordinary_runs(self):
        r = self.result
        folders = sorted(n for n in os.listdir(self.dir) if os.path.isdir(os.path.join(self.dir, n))
                         and n[0].isdigit())
        self.assertEqual(folders, [c[0] for c in CELLS], r.shown)
        for name, heads, seed in CELLS:
            cell = os.path.join(self.dir, name)
            for entry in ("config.toml", "metrics.h5", "summary.json"):
                self.assertTrue(os.path.isfile(os.path.join(cell, entry)), f"{cell}: no {entry}\n{r.shown}")
            self.assertTrue(os.path.isdir(os.path.join(cell, "checkpoints")), f"{cell}: no checkpoints/")
            self.assertTrue(os.listdir(os.path.join(cell, "checkpoints")), f"{cell}: empty checkpoints/")
            # The resolved config holds the cell's values and the base's others.
            with open(os.path.join(cell, "config.toml"), "rb") as f:
                config = tomllib.load(f)
            self.assertEqual(config["model"]["heads"], int(heads), name)
            self.assertEqual(config["run"]["seed"], int(seed), name)
            self.assertEqual(config["model"]["width"], 16, name)
            self.assertEqual(config["task"]["name"], "copy", name)
            self.assertEqual(config["train"]["steps"], 60, name)
            self.assertNotIn("sweep", config, f"{name}: the cell's config still has a [sweep] table")
            summary = self.summaries[name]
            self.assertEqual(summary["steps"], 60, name)
            for key in sc.SUMMARY_COLUMNS:
                self.assertTrue(math.isfinite(summary[key]), f"{name}: {key} = {summary[key]}")
            # Its metrics.h5 logged every head of the swept head count, with a clean mask.
            with h5py.File(os.path.join(cell, "metrics.h5"), "r", libver="latest", swmr=True) as f:
                self.assertEqual(int(f.attrs["heads"]), int(heads), name)
                self.assertEqual(list(f["train/step"][()]), [10, 20, 30, 40, 50, 60], name)
                mm = f["attention/self/masked_mass_max"][()]
                self.assertEqual(mm.shape[2], int(heads), name)
                self.assertEqual(float(np.max(mm)), 0.0, f"{name}: masked mass {mm}")
        self.assertIn("4 of 4 cells ok", r.stdout, r.shown)

    def test_stderr_reports_each_cell(self):
        lines = self.result.stderr.splitlines()
        for name, _, _ in CELLS:
            self.assertIn(f"sweep: {name}: starting", lines, self.result.shown)
            self.assertIn(f"sweep: {name}: ok", lines, self.result.shown)

    def test_summary_csv_is_well_formed(self):
        # Every row has as many fields as the header (RFC 4180: a field holding a
        # comma is quoted). Cell names hold commas ("0_model.heads=1,run.seed=0").
        rows = sc.read_csv_rows(os.path.join(self.dir, "summary.csv"))
        header = rows[0]
        self.assertEqual(header[:6], ["row", "name", "model.heads", "run.seed", "status", "n"])
        bad = [row for row in rows[1:] if len(row) != len(header)]
        self.assertEqual(len(bad), 0, f"summary.csv: {len(bad)} rows do not have the header's {len(header)} fields, "
                              f"e.g. {bad[:1]}")

    def test_summary_csv_cells_match_their_summary_json(self):
        header, cells, aggregates = sc.read_summary_csv(os.path.join(self.dir, "summary.csv"))
        for column in sc.SUMMARY_COLUMNS + ["masked_mass_max"]:
            self.assertIn(column, header)
            self.assertIn(column + "_std", header)
        self.assertEqual(len(cells), 4, cells)
        self.assertEqual(len(aggregates), 2, aggregates)
        for row, (name, heads, seed) in zip(cells, CELLS):
            self.assertEqual((row["name"], row["model.heads"], row["run.seed"], row["status"], row["n"]),
                             (name, heads, seed, "ok", "1"))
            summary = self.summaries[name]
            for column in sc.SUMMARY_COLUMNS:
                self.assertTrue(sc.same(sc.csv_number(row[column]), sc.g10(summary[column])),
                                f"{name}: {column}: csv {row[column]!r}, summary.json {summary[column]!r}")
                self.assertEqual(row[column + "_std"], "", f"{name}: a cell row with a std")
            self.assertEqual(sc.csv_number(row["masked_mass_max"]), 0.0, name)

    def test_summary_csv_aggregates_over_seeds(self):
        _, _, aggregates = sc.read_summary_csv(os.path.join(self.dir, "summary.csv"))
        self.assertEqual([(a["model.heads"], a["run.seed"], a["status"], a["n"]) for a in aggregates],
                         [("1", "*", "2/2 ok", "2"), ("2", "*", "2/2 ok", "2")])
        for row, heads in zip(aggregates, ["1", "2"]):
            members = [self.summaries[name] for name, h, _ in CELLS if h == heads]
            for column in sc.SUMMARY_COLUMNS:
                xs = [m[column] for m in members]
                mean, std = statistics.mean(xs), statistics.stdev(xs)  # sample std, ddof = 1
                self.assertTrue(sc.same(sc.csv_number(row[column]), mean, rel=1e-9),
                                f"heads {heads}: {column} mean: csv {row[column]}, by hand {mean!r} from {xs}")
                self.assertTrue(sc.same(sc.csv_number(row[column + "_std"]), std, rel=1e-9),
                                f"heads {heads}: {column} std: csv {row[column + '_std']}, by hand {std!r} from {xs}")
            self.assertEqual(sc.csv_number(row["masked_mass_max"]), 0.0)
            self.assertEqual(sc.csv_number(row["masked_mass_max_std"]), 0.0)
        # The hand computation the brief names, spelled out for eval_loss.
        for row, heads in zip(aggregates, ["1", "2"]):
            a, b = [self.summaries[name]["eval_loss"] for name, h, _ in CELLS if h == heads]
            mean, std = (a + b) / 2, abs(a - b) / math.sqrt(2)
            self.assertTrue(math.isclose(float(row["eval_loss"]), mean, rel_tol=1e-9), (row["eval_loss"], mean))
            self.assertTrue(math.isclose(float(row["eval_loss_std"]), std, rel_tol=1e-8), (row["eval_loss_std"], std))

    def test_summary_h5_matches(self):
        h5 = sc.read_summary_h5(os.path.join(self.dir, "summary.h5"))
        self.assertEqual(h5["attrs"].get("format"), "attnlab-sweep")
        cells, agg = h5["cells"], h5["aggregated"]
        self.assertEqual(cells["name"], [c[0] for c in CELLS])
        self.assertEqual(cells["keys/model.heads"], [c[1] for c in CELLS])
        self.assertEqual(cells["keys/run.seed"], [c[2] for c in CELLS])
        self.assertEqual(cells["status"], ["ok"] * 4)
        for i, (name, _, _) in enumerate(CELLS):
            for column in sc.SUMMARY_COLUMNS:
                expected = self.summaries[name][column]
                self.assertTrue(sc.same(cells[column][i], expected, rel=1e-12),
                                f"{name}: {column}: h5 {cells[column][i]!r}, summary.json {expected!r}")
        self.assertEqual(cells["masked_mass_max"], [0.0] * 4)
        self.assertEqual(agg["keys/model.heads"], ["1", "2"])
        self.assertEqual(agg["keys/run.seed"], ["*", "*"])
        self.assertEqual(agg["status"], ["2/2 ok", "2/2 ok"])
        self.assertEqual(agg["n"], [2.0, 2.0])
        for i, heads in enumerate(["1", "2"]):
            members = [self.summaries[name] for name, h, _ in CELLS if h == heads]
            for column in sc.SUMMARY_COLUMNS:
                xs = [m[column] for m in members]
                self.assertTrue(sc.same(agg[column][i], statistics.mean(xs), rel=1e-12), (column, agg[column][i], xs))
                self.assertTrue(sc.same(agg[column + "_std"][i], statistics.stdev(xs), rel=1e-9),
                                (column, agg[column + "_std"][i], xs))
        self.assertEqual(agg["masked_mass_max"], [0.0, 0.0])
        # The CSV and the HDF5 table carry the same numbers (to the CSV's 10 digits).
        _, csv_cells, csv_agg = sc.read_summary_csv(os.path.join(self.dir, "summary.csv"))
        for group, rows in (("cells", csv_cells), ("aggregated", csv_agg)):
            for column, values in h5[group].items():
                if column in ("name", "status") or column.startswith("keys/") or column == "n":
                    continue
                for i, row in enumerate(rows):
                    self.assertTrue(sc.same(sc.csv_number(row[column]), sc.g10(values[i]) if not math.isnan(values[i])
                                            else math.nan, rel=1e-9),
                                    f"{group}[{i}] {column}: csv {row[column]!r}, h5 {values[i]!r}")


def cores():
    return len(os.sched_getaffinity(0))


def cell_config(sweep_dir, name):
    with open(os.path.join(sweep_dir, name, "config.toml"), "rb") as f:
        return tomllib.load(f)


class OverridesReachTheCells(sc.SweepTest):
    """Every override on the sweep's command line is in each cell's config.toml
    (the refused ones: test_sweep_bad_inputs.py). train.threads given (override
    or config file) is every cell's; not given, each cell gets the cores split
    between --jobs."""

    NAMES = ["0_model.heads=1", "1_model.heads=2"]

    def test_overrides_of_every_kind(self):
        threads = cores() // 2 + 1  # never what splitting the cores between 2 jobs gives
        config = self.write_config(sc.config_text(sweep=[("model.heads", "[1, 2]")]))
        r = self.sweep(config, "--jobs", "2", f"train.threads={threads}", "optim.lr=0.002", "model.ffn=24",
                       "run.out_dir=elsewhere", "run.name=named", "task.max_len=5")
        sweep_dir = self.path("elsewhere", "named")
        self.assertFalse(os.path.exists(self.path("out")), r.shown)
        for name, heads in zip(self.NAMES, (1, 2)):
            cell = cell_config(sweep_dir, name)
            self.assertEqual(cell["train"]["threads"], threads, name)
            self.assertEqual(cell["optim"]["lr"], 0.002, name)
            self.assertEqual(cell["model"]["ffn"], 24, name)
            self.assertEqual(cell["model"]["heads"], heads, name)
            self.assertEqual(cell["task"]["max_len"], 5, name)
            self.assertEqual(cell["run"]["out_dir"], os.path.join("elsewhere", "named"), name)
            self.assertEqual(cell["run"]["name"], name)
            self.assertIn("run " + os.path.join("elsewhere", "named", name), self.log(sweep_dir, name))
        with open(os.path.join(sweep_dir, "sweep.toml"), "rb") as f:
            saved = tomllib.load(f)
        self.assertEqual((saved["run"]["name"], saved["run"]["out_dir"], saved["train"]["threads"]),
                         ("named", "elsewhere", threads))

    def log(self, sweep_dir, name):
        with open(os.path.join(sweep_dir, "logs", name + ".log")) as f:
            return f.read()

    def test_threads_from_the_config_file(self):
        threads = cores() + 1
        config = self.write_config(sc.config_text(sweep=[("model.heads", "[1, 2]")], train__threads=str(threads)))
        self.sweep(config)
        for name in self.NAMES:
            self.assertEqual(cell_config(self.sweep_dir(), name)["train"]["threads"], threads, name)

    def test_threads_not_given_split_the_cores(self):
        config = self.write_config(sc.config_text(sweep=[("model.heads", "[1, 2]")]))
        self.sweep(config, "--jobs", "2")
        for name in self.NAMES:
            self.assertEqual(cell_config(self.sweep_dir(), name)["train"]["threads"], max(1, cores() // 2), name)

    def test_threads_of_a_rerun_reach_a_resumed_cell(self):
        config = self.write_config(sc.config_text(sweep=[("model.heads", "[1, 2]")]))
        self.sweep(config)
        cell = os.path.join(self.sweep_dir(), self.NAMES[1])
        os.remove(os.path.join(cell, "summary.json"))
        os.remove(os.path.join(cell, "checkpoints", "step_0000060.h5"))
        threads = cores() + 1
        r = self.sweep(config, f"train.threads={threads}")
        self.assertIn(f"sweep: {self.NAMES[1]}: resuming", r.stderr.splitlines(), r.shown)
        self.assertEqual(cell_config(self.sweep_dir(), self.NAMES[1])["train"]["threads"], threads)
        with open(os.path.join(cell, "resumes.log")) as f:
            self.assertEqual(f.read(), f"step 30: resumed with train.threads ({threads}, was {cores()})\n")
        self.assertEqual(sc.read_json(os.path.join(cell, "summary.json"))["steps"], 60)
        # the finished cell was left as it was
        self.assertEqual(cell_config(self.sweep_dir(), self.NAMES[0])["train"]["threads"], cores())


class ListValuedAxis(sc.SweepTest):
    """An axis whose values are TOML arrays ("optim.betas"): the values hold
    commas and spaces, in the folder names (sanitised) and the tables."""

    def test_list_values(self):
        config = self.write_config(sc.config_text(sweep=[("optim.betas", "[[0.9, 0.98], [0.9, 0.999]]")],
                                                  train__steps="20", train__eval_every="10",
                                                  train__checkpoint_every="10"))
        r = self.sweep(config, "--jobs", "2")
        d = self.sweep_dir()
        h5 = sc.read_summary_h5(os.path.join(d, "summary.h5"))
        self.assertEqual(h5["cells"]["keys/optim.betas"], ["[0.9, 0.98]", "[0.9, 0.999]"], r.shown)
        self.assertEqual(h5["cells"]["status"], ["ok", "ok"], r.shown)
        for name, betas in zip(h5["cells"]["name"], ([0.9, 0.98], [0.9, 0.999])):
            self.assertTrue(name.startswith(("0_optim.betas=", "1_optim.betas=")), name)
            self.assertFalse(set(name) & set('/ "[]'), f"unsanitised folder name {name!r}")
            with open(os.path.join(d, name, "config.toml"), "rb") as f:
                self.assertEqual(tomllib.load(f)["optim"]["betas"], betas, name)
        rows = sc.read_csv_rows(os.path.join(d, "summary.csv"))
        header = rows[0]
        bad = [row for row in rows[1:] if len(row) != len(header)]
        self.assertEqual(len(bad), 0, f"summary.csv: {len(bad)} rows do not have the header's {len(header)} fields, "
                                      f"e.g. {bad[:1]}")
        column = header.index("optim.betas")
        self.assertEqual([row[column] for row in rows[1:]], ["[0.9, 0.98]", "[0.9, 0.999]"] * 2)


class KeysSomeCellsRead(sc.SweepTest):
    """A key of the base that only some cells read (model.rotary_base with a
    positional axis): the cells that read it run with it, the others with its
    default, and each cell's config.toml says which; both train."""

    def test_rotary_base_in_a_positional_sweep(self):
        config = self.write_config(sc.config_text(sweep=[("model.positional", '["learned", "rotary"]')],
                                                  model__rotary_base="500.0", train__steps="20", train__eval_every="10",
                                                  train__checkpoint_every="10"))
        r = self.sweep(config, "--jobs", "2")
        d = self.sweep_dir()
        h5 = sc.read_summary_h5(os.path.join(d, "summary.h5"))
        self.assertEqual(h5["cells"]["status"], ["ok", "ok"], r.shown)
        bases = {}
        for name in h5["cells"]["name"]:
            with open(os.path.join(d, name, "config.toml"), "rb") as f:
                model = tomllib.load(f)["model"]
            bases[model["positional"]] = model["rotary_base"]
        self.assertEqual(bases, {"learned": 10000.0, "rotary": 500.0}, r.shown)


if __name__ == "__main__":
    sc.main()
