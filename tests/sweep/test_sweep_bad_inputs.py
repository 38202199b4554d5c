"""Bad sweep input is refused before any cell starts: exit status 2, nothing on
stdout, one line on stderr that names the key (or option) at fault, and nothing
created: no out_dir, no other file in the working directory.

    /usr/bin/python3 tests/sweep/test_sweep_bad_inputs.py ATTNLAB_BINARY
"""
import os

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
    ("bad override", GOOD_SWEEP, ["model.heads=abc"], {}, ["model.heads", "abc"]),
    ("unknown override key", GOOD_SWEEP, ["model.headz=2"], {}, ["model.headz"]),
    ("missing config file", GOOD_SWEEP, ["@missing"], {}, ["missing.toml"]),
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


if __name__ == "__main__":
    sc.main()
