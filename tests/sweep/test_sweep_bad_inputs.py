"""Bad sweep input is refused before any cell starts: exit status 2, nothing on
stdout, one line on stderr that names the key (or option, file, folder) at
fault, and nothing created: no out_dir, no other file in the working directory.
Where a run or a sweep exists already (a single run or another sweep in the
sweep's folder, a garbled summary.json, a foreign cell folder), the whole
working directory is compared byte for byte (and mtime) before and after.

    /usr/bin/python3 tests/sweep/test_sweep_bad_inputs.py ATTNLAB_BINARY
"""
import os
import re
import shutil

import h5py
import numpy as np

import sweep_common as sc

GOOD_SWEEP = [("model.heads", "[1, 2]")]
NINE = "[0, 1, 2, 3, 4, 5, 6, 7, 8]"

# name, [sweep] axes (None: no [sweep] table), extra args (None: no CONFIG at all),
# config changes, substrings the one stderr line must hold.
CASES = [
    ("unknown key", [("model.head", "[1, 2]")], [], {},
     ["model.head", "did you mean model.heads?"]),
    ("unknown section.key", [("modle.heads", "[1, 2]")], [], {}, ["modle.heads"]),
    ("empty list", [("model.heads", "[]")], [], {}, ["model.heads", "empty"]),
    ("not a list", [("model.heads", "2")], [], {}, ["model.heads"]),
    ("wrong type", [("model.heads", '["four"]')], [], {}, ["model.heads", "expected an integer"]),
    ("wrong type, second value", [("model.heads", '[1, "two"]')], [], {}, ["model.heads", "[1]"]),
    ("out of range", [("model.heads", "[0]")], [], {}, ["model.heads", "0"]),
    ("bad enum value", [("model.scale", '["sqrt", "bogus"]')], [], {}, ["model.scale", "bogus"]),
    ("cell breaks a cross-field rule", [("model.heads", "[1, 3]")], [], {},
     ["model.heads", "3", "model.width", "16"]),
    ("cell breaks a rule only with another axis", [("model.width", "[16, 18]"), ("model.heads", "[1, 4]")], [], {},
     ["model.width", "18", "model.heads", "4"]),
    ("grid over 64 cells without --force", [("run.seed", NINE), ("optim.warmup", NINE)], [], {},
     ["81", "64", "--force"]),
    ("no [sweep] table", None, [], {}, ["sweep"]),
    ("--jobs 0", GOOD_SWEEP, ["--jobs", "0"], {}, ["--jobs", "0"]),
    ("--jobs -1", GOOD_SWEEP, ["--jobs", "-1"], {}, ["--jobs"]),
    ("--jobs without a value", GOOD_SWEEP, ["--jobs"], {}, ["jobs"]),
    ("unknown option", GOOD_SWEEP, ["--bogus"], {}, ["bogus"]),
    ("misspelt option (the shared parser's suggestion)", GOOD_SWEEP, ["--job", "2"], {}, ["--job", "did you mean --jobs?"]),
    ("--jobs empty", GOOD_SWEEP, ["--jobs="], {}, ["--jobs: empty value"]),
    ("--cell not a number", GOOD_SWEEP, ["--cell", "one"], {}, ["--cell: expected an integer", "one"]),
    ("bad override", GOOD_SWEEP, ["model.heads=abc"], {}, ["model.heads", "abc"]),
    ("unknown override key", GOOD_SWEEP, ["model.headz=2"], {}, ["model.headz"]),
    ("missing config file", GOOD_SWEEP, ["@missing"], {}, ["missing.toml"]),
    # A grid that would run a cell twice, or that the sweep itself overrides.
    ("duplicate value", [("model.heads", "[2, 2]")], [], {}, ["model.heads", "2"]),
    ("duplicate value written two ways", [("optim.lr", "[1e-3, 0.001]")], [], {}, ["optim.lr", "0.001"]),
    ("duplicate list value", [("optim.betas", "[[0.9, 0.98], [0.9, 0.98]]")], [], {}, ["optim.betas", "[0.9, 0.98]"]),
    ("override of a swept key", GOOD_SWEEP, ["model.heads=4"], {}, ["model.heads=4", "model.heads", "[1, 2]"]),
    ("override of a swept key, spaced", GOOD_SWEEP, [" model.heads = 4"], {}, ["model.heads", "[1, 2]"]),
    ("override of the grid itself", GOOD_SWEEP, ["sweep.model.heads=[1, 4]"], {}, ["sweep.model.heads"]),
    ("override of train.threads out of range", GOOD_SWEEP, ["train.threads=5000"], {}, ["train.threads", "5000"]),
    ("sweep over run.name", [("run.name", '["a", "b"]')], [], {}, ["run.name"]),
    ("sweep over run.out_dir", [("run.out_dir", '["a", "b"]')], [], {}, ["run.out_dir"]),
    ("sweep over train.threads", [("train.threads", "[1, 2]")], [], {}, ["train.threads", "--jobs"]),
    # What `attnlab train` would refuse only once it reads the data.
    ("missing token file", GOOD_SWEEP, [], {"task__name": '"file"', "task__path": '"no_tokens.h5"', "task__min_len": None, "task__max_len": None},
     ["no_tokens.h5", "0_model.heads=1"]),
    ("token file that is not HDF5", GOOD_SWEEP, [], {"task__name": '"file"', "task__path": '"sweep.toml"', "task__min_len": None, "task__max_len": None},
     ["sweep.toml", "0_model.heads=1"]),
    # Paths the filesystem cannot hold.
    ("run.name too long", GOOD_SWEEP, [], {"run__name": '"' + "n" * 300 + '"'}, ["run.name", "300"]),
    ("run.out_dir too long", GOOD_SWEEP, [], {"run__out_dir": '"' + "d/" * 2100 + '"'}, ["run.out_dir"]),
    ("cell paths too long", [("optim.lr", "[0.0012345678901234567]"), ("optim.eps", "[1.2345678901234567e-8]"),
                             ("optim.weight_decay", "[0.012345678901234567]"), ("optim.clip", "[1.2345678901234567]")],
     [], {"run__out_dir": '"' + "d/" * 1975 + '"'}, ["cell 0", "4096", "run.out_dir"]),
]

# The same, for configs that the table above cannot write: name, TOML text, want.
RAW_CASES = [
    ("same key quoted and in a nested table",
     sc.config_text(sweep=[("model.heads", "[1, 2]")]) + "[sweep.model]\nheads = [4]\n", ["model.heads", "twice"]),
    ("same key quoted and dotted",
     sc.config_text(sweep=[]) + 'model.heads = [1, 2]\n"model.heads" = [4]\n', ["model.heads", "twice"]),
    ("same key quoted and as an inline table",
     sc.config_text(sweep=[("model.heads", "[1, 2]")]) + "model = { heads = [4] }\n", ["model.heads", "twice"]),
]


class BadInputs(sc.SweepTest):
    def check_refused(self, args, want, label):
        r = sc.attnlab(args, self.tmp)
        shown = f"[{label}] " + sc.shown(args, r)
        self.assertEqual(r.returncode, 2, shown)
        self.assertEqual(r.stdout, "", shown)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, shown)
        self.assertTrue(lines[0].startswith("attnlab sweep: "), shown)
        for text in want:
            self.assertIn(text, lines[0], shown)
        self.assertFalse(os.path.exists(self.path("out")), f"out_dir was created\n{shown}")
        left = sorted(os.listdir(self.tmp))
        self.assertEqual(left, ["sweep.toml"] if os.path.exists(self.path("sweep.toml")) else [],
                         f"files were created in the working directory\n{shown}")
        self.assertFalse(os.path.exists(self.path("d")), f"run.out_dir was created\n{shown}")

    def test_refused_before_any_cell(self):
        for name, sweep, extra, changes, want in CASES:
            with self.subTest(name):
                for entry in os.listdir(self.tmp):
                    os.remove(self.path(entry))
                config = self.write_config(sc.config_text(sweep=sweep, **changes))
                if extra == ["@missing"]:
                    os.remove(self.path(config))
                    args = ["sweep", "missing.toml"]
                else:
                    args = ["sweep", config] + extra
                self.check_refused(args, want, name)

    def test_refused_raw_configs(self):
        for name, text, want in RAW_CASES:
            with self.subTest(name):
                for entry in os.listdir(self.tmp):
                    os.remove(self.path(entry))
                self.check_refused(["sweep", self.write_config(text)], want, name)

    def test_no_config_argument(self):
        self.check_refused(["sweep"], ["CONFIG"], "no CONFIG")
        self.check_refused(["sweep", "--jobs", "2"], ["CONFIG"], "no CONFIG, --jobs 2")

    def test_jobs_not_a_number_names_the_option(self):
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP))
        self.check_refused(["sweep", config, "--jobs", "x"], ["jobs", "x"], "--jobs x")

    def test_existing_sweep_untouched_by_a_refused_rerun(self):
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP))
        self.sweep(config)
        before = sc.tree_state(self.path("out"))
        for name, extra in (("--jobs 0", ["--jobs", "0"]), ("bad override", ["model.heads=abc"])):
            args = ["sweep", config] + extra
            r = sc.attnlab(args, self.tmp)
            self.assertEqual(r.returncode, 2, f"[{name}] " + sc.shown(args, r))
            self.assertEqual(sc.tree_state(self.path("out")), before, f"[{name}] the sweep folder changed")
        # A broken [sweep] table on the same out_dir/run.name.
        self.write_config(sc.config_text(sweep=[("model.heads", "[1, 3]")]))
        r = sc.attnlab(["sweep", config], self.tmp)
        self.assertEqual(r.returncode, 2, sc.shown(["sweep", config], r))
        self.assertEqual(sc.tree_state(self.path("out")), before, "the sweep folder changed")



def write_tokens(path, rows=40, length=6, token=5, lengths=None):
    tokens = np.full((rows, length), token, np.int32)
    with h5py.File(path, "w") as f:
        f.create_dataset("tokens", data=tokens)
        f["lengths"] = np.full(rows, length, np.int32) if lengths is None else np.asarray(lengths, np.int32)


FILE_TASK = {"task__name": '"file"', "task__path": '"tokens.h5"', "task__min_len": None, "task__max_len": None}


class RefusedWithFilesAround(sc.SweepTest):
    """Each case sets up files (a finished sweep, a single run, token files),
    then runs a bad sweep: exit 2, one line naming what and where, nothing on
    stdout, and not one byte or mtime changed anywhere in the working directory."""

    def refused(self, args, want, label=""):
        before = sc.tree_state(self.tmp)
        r = sc.attnlab(args, self.tmp)
        shown = f"[{label}] " + sc.shown(args, r)
        self.assertEqual(r.returncode, 2, shown)
        self.assertEqual(r.stdout, "", shown)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, shown)
        self.assertTrue(lines[0].startswith("attnlab sweep: "), shown)
        for text in want:
            self.assertIn(text, lines[0], shown)
        after = sc.tree_state(self.tmp)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        self.assertEqual(changed, [], f"files changed, appeared or went\n{shown}")
        return lines[0]

    def finished_sweep(self, sweep=GOOD_SWEEP, **changes):
        config = self.write_config(sc.config_text(sweep=sweep, **changes))
        self.sweep(config)
        return config

    # --- class 1: the folder holds another sweep

    def test_other_axes_same_name(self):
        self.finished_sweep()
        config = self.write_config(sc.config_text(sweep=[("model.heads", "[1, 4]")]), "other.toml")
        line = self.refused(["sweep", config], ["out/tiny", "sweep.model.heads", "[1, 4]", "[1, 2]"])
        self.assertIn("another sweep", line)

    def test_extra_axis_same_name(self):
        self.finished_sweep()
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP + [("run.seed", "[0, 1]")]), "other.toml")
        self.refused(["sweep", config], ["out/tiny", "sweep.run.seed"])

    def test_axes_in_another_order(self):
        self.finished_sweep(sweep=[("model.heads", "[1, 2]"), ("run.seed", "[0, 1]")])
        config = self.write_config(sc.config_text(sweep=[("run.seed", "[0, 1]"), ("model.heads", "[1, 2]")]), "other.toml")
        self.refused(["sweep", config], ["out/tiny", "order", "run.seed, model.heads"])

    def test_other_base_config_same_name(self):
        config = self.finished_sweep()
        self.refused(["sweep", config, "optim.lr=0.01"], ["out/tiny", "optim.lr", "0.01"])
        self.refused(["sweep", config, "model.ffn=64"], ["out/tiny", "model.ffn", "64"])

    def test_garbled_sweep_toml(self):
        config = self.finished_sweep()
        with open(self.path("out", "tiny", "sweep.toml"), "a") as f:
            f.write("[model\n")
        self.refused(["sweep", config], ["out/tiny/sweep.toml"])

    # --- class 2: the folder is not one of our sweeps

    def test_into_a_single_run(self):
        base = self.write_config(sc.config_text(), "single.toml")
        r = sc.attnlab(["train", base], self.tmp)
        self.assertEqual(r.returncode, 0, sc.shown(["train", base], r))
        self.assertTrue(os.path.isfile(self.path("out", "tiny", "metrics.h5")))
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP))
        line = self.refused(["sweep", config], ["out/tiny", "single run", "config.toml", "run.name"])
        self.assertNotIn("Traceback", line)

    def test_into_the_default_single_run(self):
        # A sweep sent into runs/default on purpose (run.name=default) meets the single run there.
        r = sc.attnlab(["train", self.write_config(sc.config_text(run__name=None), "single.toml")], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP, run__name=None))
        self.refused(["sweep", config, "run.name=default"], ["out/default", "single run"])

    def test_into_a_folder_of_other_files(self):
        os.makedirs(self.path("out", "tiny", "notes"))
        with open(self.path("out", "tiny", "README.txt"), "w") as f:
            f.write("mine\n")
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP))
        self.refused(["sweep", config], ["out/tiny", "not a sweep folder", "README.txt"])

    def test_sweep_folder_is_a_file(self):
        os.makedirs(self.path("out"))
        with open(self.path("out", "tiny"), "w") as f:
            f.write("x\n")
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP))
        self.refused(["sweep", config], ["out/tiny", "not a folder"])

    def test_out_dir_is_a_run(self):
        r = sc.attnlab(["train", self.write_config(sc.config_text(), "single.toml")], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP, run__out_dir='"out/tiny"', run__name='"inner"'))
        self.refused(["sweep", config], ["run.out_dir", "out/tiny", "config.toml"])

    def test_out_dir_is_a_file(self):
        with open(self.path("out"), "w") as f:
            f.write("x\n")
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP))
        for mode in ([], ["--cell", "0"], ["--slurm"]):
            with self.subTest(mode=mode):
                self.refused(["sweep", config] + mode, ["run.out_dir out", "out exists and is not a folder"])
        # a file further up the path, too
        self.refused(["sweep", config, "run.out_dir=out/deeper"], ["run.out_dir out/deeper", "out exists and is not a folder"])

    # --- every mode checks the folder alike: --slurm writes no script, --cell runs no cell

    def test_slurm_and_cell_check_the_folder(self):
        r = sc.attnlab(["train", self.write_config(sc.config_text(), "single.toml")], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP))
        for mode in (["--slurm"], ["--cell", "1"]):
            with self.subTest(f"{mode}: a single run"):
                self.refused(["sweep", config] + mode, ["out/tiny", "single run", "config.toml"])
        shutil.rmtree(self.path("out"))
        other = self.write_config(sc.config_text(sweep=[("model.heads", "[1, 4]")]), "other.toml")
        self.finished_sweep()
        for mode in (["--slurm"], ["--cell", "0"]):
            with self.subTest(f"{mode}: another sweep"):
                self.refused(["sweep", other] + mode, ["out/tiny", "another sweep", "sweep.model.heads"])
            with self.subTest(f"{mode}: the out_dir is a run"):
                self.refused(["sweep", config, "run.out_dir=out/tiny/0_model.heads=1", "run.name=inner"] + mode,
                             ["run.out_dir", "out/tiny/0_model.heads=1", "config.toml"])
        shutil.rmtree(self.path("out"))
        os.makedirs(self.path("out", "tiny", "notes"))
        for mode in (["--slurm"], ["--cell", "0"]):
            with self.subTest(f"{mode}: foreign files"):
                self.refused(["sweep", config] + mode, ["out/tiny", "not a sweep folder", "notes"])

    def test_slurm_checks_every_cell_as_training_would(self):
        config = self.write_config(sc.config_text(sweep=[("task.path", '["tokens.h5", "gone.h5"]')], **FILE_TASK))
        write_tokens(self.path("tokens.h5"))
        self.refused(["sweep", config, "--slurm"], ["1_task.path=gone.h5", "gone.h5"])

    # --- class 6: a finished cell's summary.json is garbled

    def garble_summary(self, edit):
        config = self.finished_sweep()
        path = self.path("out", "tiny", "1_model.heads=2", "summary.json")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(edit(text))
        return config

    def test_garbled_number_in_summary(self):
        config = self.garble_summary(lambda t: re.sub(r'"eval_loss": ([0-9.]+)', r'"eval_loss": \g<1>x', t))
        self.refused(["sweep", config], ["out/tiny/1_model.heads=2/summary.json:4", "eval_loss", "x"])

    def test_out_of_range_number_in_summary(self):
        config = self.garble_summary(lambda t: re.sub(r'"wall_s": [0-9.e-]+', '"wall_s": 1e999', t))
        self.refused(["sweep", config], ["1_model.heads=2/summary.json:9", "wall_s", "1e999"])

    def test_string_for_a_number_in_summary(self):
        config = self.garble_summary(lambda t: re.sub(r'"eval_seq_acc": [0-9.e-]+', '"eval_seq_acc": "high"', t))
        self.refused(["sweep", config], ["1_model.heads=2/summary.json:6", "eval_seq_acc"])

    def test_truncated_summary(self):
        config = self.garble_summary(lambda t: t[: len(t) // 2])
        self.refused(["sweep", config], ["1_model.heads=2/summary.json"])

    def test_empty_summary(self):
        config = self.garble_summary(lambda t: "")
        self.refused(["sweep", config], ["1_model.heads=2/summary.json:1"])

    # --- cell folders of this sweep that are no run of their cell

    def test_cell_folder_with_another_config(self):
        config = self.finished_sweep()
        path = self.path("out", "tiny", "0_model.heads=1", "config.toml")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("ffn = 32", "ffn = 64"))
        self.refused(["sweep", config], ["out/tiny/0_model.heads=1", "model.ffn"])

    def test_cell_folder_with_foreign_files_is_not_removed(self):
        config = self.finished_sweep()
        cell = self.path("out", "tiny", "1_model.heads=2")
        os.remove(os.path.join(cell, "summary.json"))
        shutil.rmtree(os.path.join(cell, "checkpoints"))
        with open(os.path.join(cell, "my_notes.txt"), "w") as f:
            f.write("keep me\n")
        self.refused(["sweep", config], ["out/tiny/1_model.heads=2", "my_notes.txt"])

    def test_cell_path_is_a_file(self):
        config = self.finished_sweep()
        shutil.rmtree(self.path("out", "tiny", "1_model.heads=2"))
        with open(self.path("out", "tiny", "1_model.heads=2"), "w") as f:
            f.write("x\n")
        self.refused(["sweep", config], ["out/tiny/1_model.heads=2", "not a folder"])

    # --- class 4: every cell checked as training would, the first cell included

    def test_token_file_missing_for_the_second_cell(self):
        write_tokens(self.path("tokens.h5"))
        config = self.write_config(sc.config_text(sweep=[("task.path", '["tokens.h5", "gone.h5"]')], **FILE_TASK))
        self.refused(["sweep", config], ["1_task.path=gone.h5", "gone.h5"])

    def test_token_outside_vocab(self):
        write_tokens(self.path("tokens.h5"), token=40)
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP, **FILE_TASK))
        self.refused(["sweep", config], ["tokens.h5", "vocab", "0_model.heads=1"])

    def test_max_len_shorter_than_the_token_file(self):
        write_tokens(self.path("tokens.h5"))
        config = self.write_config(sc.config_text(sweep=[("model.max_len", "[16, 4]")], **FILE_TASK))
        self.refused(["sweep", config], ["1_model.max_len=4", "model.max_len", "tokens.h5"])

    def test_token_file_missing_on_a_rerun(self):
        # The finished cells need no data; the one still to run does.
        write_tokens(self.path("tokens.h5"))
        config = self.write_config(sc.config_text(sweep=GOOD_SWEEP, **FILE_TASK))
        self.sweep(config)
        shutil.rmtree(self.path("out", "tiny", "1_model.heads=2"))
        os.rename(self.path("tokens.h5"), self.path("tokens.moved"))
        self.refused(["sweep", config], ["1_model.heads=2", "tokens.h5"])


if __name__ == "__main__":
    sc.main()
