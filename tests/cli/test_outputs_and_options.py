"""Outputs never replace inputs; empty and overlong values are refused in one short line.

Each case must end as all bad input does (tests/cli/cli_common.run_refused):
exit 2, nothing on stdout, one line naming the culprit, nothing written, the
run folder unchanged. The classes:

  - an output (--out, --maps, --png) that is an input or a file the command
    does not own (metrics.h5, config.toml, a checkpoint, another command's
    result, a user's file) is refused before any work; --png naming a file too;
  - an empty value (`--hooks ""`, `--run-dir ""`) or an empty item of a list
    (`--hooks ",,"`) is refused, never read as if the option were absent;
  - a message quotes at most a bounded prefix of an overlong value;
  - the memory estimate names the key that makes a config too big
    (train.eval_lengths, not task.max_len).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_common as cc  # noqa: E402

CONFIG = dict(cc.TINY, **{"model.layers": "2", "task.name": "copy"})
CLEAN = "3 9 4 12 5 1 5 12 4"
CORRUPT = "3 8 4 11 5 1 5 12 4"


class OutputsAndOptions(cc.TempDirTest):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="attnlab_outputs_")
        r = cc.attnlab(["train"] + cc.overrides(CONFIG, **{"run.out_dir": cls.root}), cls.root)
        assert r.returncode == 0, r.stderr
        cls.run_dir = os.path.join(cls.root, "default")
        cls.ckpt = cc.checkpoint_path(cls.run_dir, 40)
        cls.older = cc.checkpoint_path(cls.run_dir, 30)
        cls.user = os.path.join(cls.root, "notes.h5")  # a user's own HDF5 file
        with h5py.File(cls.user, "w") as f:
            f["x"] = np.arange(3)
        cls.inspect = os.path.join(cls.root, "mine.h5")  # an inspect file: inspect may replace it
        r = cc.attnlab(["inspect", cls.ckpt, "--tokens", "3 4 5", "--out", cls.inspect], cls.root)
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def refused(self, args, wants):
        work = tempfile.mkdtemp(prefix="attnlab_outputs_work_")
        runs = tempfile.mkdtemp(prefix="attnlab_outputs_runs_")
        self.addCleanup(shutil.rmtree, work, ignore_errors=True)
        self.addCleanup(shutil.rmtree, runs, ignore_errors=True)
        before = {self.root: cc.tree_hashes(self.root)}
        return cc.run_refused(self, args, work, runs, wants, before)

    def test_outputs_never_replace_inputs(self):
        run, ckpt = self.run_dir, self.ckpt
        metrics, config = os.path.join(run, "metrics.h5"), os.path.join(run, "config.toml")
        patch = ["--clean", CLEAN, "--corrupt", CORRUPT, "--answers", "9:8"]
        cases = [
            (["inspect", ckpt, "--tokens", "3 4 5", "--out", metrics], ["--out", "metrics.h5", "attnlab-metrics"]),
            (["inspect", ckpt, "--tokens", "3 4 5", "--out", ckpt], ["--out", "input of this command"]),
            (["inspect", ckpt, "--tokens", "3 4 5", "--out", self.user], ["notes.h5", "refusing to replace"]),
            (["ablate", ckpt, "--out", config], ["--out", "config.toml", "not an attnlab file"]),
            (["ablate", ckpt, "--out", self.inspect], ["attnlab-inspect", "not attnlab-ablation"]),
            (["ablate", ckpt, "--maps", metrics], ["--maps", "metrics.h5"]),
            (["patch", ckpt, *patch, "--out", self.older], ["--out", "step_0000030.h5", "attnlab-checkpoint"]),
            (["lens", ckpt, "--tokens", CLEAN, "--out", metrics], ["--out", "metrics.h5"]),
            (["cache", ckpt, "--hooks", "logits", "--out", config], ["--out", "config.toml"]),
            # --png naming a file: refused before the work (it printed two lines and left the HDF5 result)
            (["patch", ckpt, *patch, "--out", os.path.join(self.root, "p_new.h5"), "--png", config], ["--png", "not a directory"]),
            (["lens", ckpt, "--tokens", CLEAN, "--out", os.path.join(self.root, "l_new.h5"), "--png", config],
             ["--png", "not a directory"]),
        ]
        for args, wants in cases:
            with self.subTest(args=" ".join(args)):
                self.refused(args, wants)
        for name in ("p_new.h5", "l_new.h5"):
            self.assertFalse(os.path.exists(os.path.join(self.root, name)))

    def test_a_file_of_the_same_command_is_replaced(self):
        out = self.path("again.h5")
        shutil.copy(self.inspect, out)
        self.run_ok(["inspect", self.ckpt, "--tokens", "3 4 5 6", "--out", out])
        with h5py.File(out) as f:
            self.assertEqual(f["tokens"].shape[1], 4)

    def test_empty_values_and_items_are_refused(self):
        ckpt = self.ckpt
        cases = [
            (["inspect", ckpt, "--tokens", "3 4 5", "--out", "x.h5", "--hooks", ""], ["--hooks", "empty value"]),
            (["inspect", ckpt, "--tokens", "3 4 5", "--out", "x.h5", "--hooks", ",,"], ["--hooks", "empty name"]),
            (["inspect", ckpt, "--tokens", "3 4 5", "--out", "x.h5", "--hooks=blocks.0.attn.z,"], ["--hooks", "empty name"]),
            (["cache", ckpt, "--hooks", "", "--out", "c.h5"], ["--hooks", "empty value"]),
            (["train", "--run-dir", ""], ["--run-dir", "empty value"]),
            (["train", "--run-dir="], ["--run-dir", "empty value"]),
            (["path-patch", ckpt, "--clean", CLEAN, "--corrupt", CORRUPT, "--answers", "9:8", "--sender", "0.0,",
              "--receiver", "1.0:q"], ["--sender", "empty name"]),
            (["eval", ""], ["empty argument"]),
        ]
        for args, wants in cases:
            with self.subTest(args=" ".join(args)):
                self.refused(args, wants)

    def test_messages_quote_a_bounded_prefix(self):
        long_name = "n" * 100000
        line, shown = self.refused(["train", f"run.name={long_name}"], ["run.name", "100000"])
        self.assertLess(len(line), 400, shown[:500])
        line, shown = self.refused(["eval", "/nonexistent/" + "d" * 5000 + ".h5"], ["characters"])
        self.assertLess(len(line), 400, shown[:500])

    def test_memory_estimate_names_the_key_that_asks_for_it(self):
        self.refused(["train", "task.name=copy", "train.eval_lengths=[200000, 200000]"],
                     ["train.eval_lengths = [200000, 200000]", "would need about"])


class DocsConfigTable(unittest.TestCase):
    """docs/config.md's table of keys is `attnlab train --keys` written out: every key, its default, its allowed
    values and its meaning as the binary's one schema gives them (a new key or choice that the page misses fails)."""

    def test_the_table_is_train_keys(self):
        listed = subprocess.run([cc.ATTNLAB, "train", "--keys"], capture_output=True, text=True, check=True).stdout
        keys = {}
        for line in listed.splitlines()[1:]:
            m = re.match(r"^(\S+\.\S+)\s{2,}(.+?)\s{2,}(.*)$", line)
            if m:
                keys[m.group(1)] = (m.group(2), m.group(3))
        self.assertGreater(len(keys), 50)
        docs = {}
        with open(os.path.join(cc.REPO_ROOT, "docs", "config.md")) as f:
            for line in f:
                cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
                # the key table: | `key` | `default` | allowed | meaning |
                if len(cells) == 4 and re.fullmatch(r"`[a-z_]+\.[a-z_0-9]+`", cells[0]):
                    allowed = cells[2].replace("\\|", "|")
                    docs[cells[0].strip("`")] = (cells[1].strip("`"), f"{cells[3]} ({allowed})")
        self.assertEqual(sorted(docs), sorted(keys), "keys in docs/config.md against train --keys")
        for key, value in keys.items():
            self.assertEqual(docs[key], value, f"docs/config.md's row of {key} against train --keys")


class Provenance(cc.TempDirTest):
    """attnlab --version; a run's summary.json, metrics.h5 and checkpoints and an analysis file say what made them."""

    def test_version_and_recorded_provenance(self):
        r = self.run_ok(["--version"])
        self.assertRegex(r.stdout, r"^attnlab \d+\.\d+\.\d+ \(commit \S+\)\n$")
        commit = r.stdout.split("commit ")[1].rstrip(")\n")
        out = self.path("runs")
        self.run_ok(["train"] + cc.overrides(CONFIG, **{"run.out_dir": out, "train.threads": "1"}))
        import json
        with open(os.path.join(out, "default", "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["attnlab_commit"], commit)
        self.assertIn("train", summary["command_line"])
        self.assertIn("run.out_dir=" + out, summary["command_line"])
        self.assertEqual(summary["threads"], 1)
        self.assertGreaterEqual(summary["cpus"], 1)
        self.assertTrue(summary["cpu"])
        run = os.path.join(out, "default")
        checkpoints = sorted(os.listdir(os.path.join(run, "checkpoints")))
        for name in ("metrics.h5", os.path.join("checkpoints", checkpoints[-1])):
            with h5py.File(os.path.join(run, name)) as f:
                self.assertEqual(f.attrs["attnlab_commit"], commit, name)
                self.assertIn("run.out_dir=" + out, f.attrs["command_line"], name)
                self.assertGreaterEqual(f.attrs["cpus"], 1, name)
        lens = self.path("l.h5")
        self.run_ok(["lens", os.path.join(out, "default"), "--tokens", "3 4 5", "--out", lens])
        with h5py.File(lens) as f:
            self.assertEqual(f.attrs["attnlab_commit"], commit)
            self.assertIn(" lens ", f.attrs["command_line"])
            self.assertEqual(f.attrs["threads"], 1)

    def test_analysis_commands_run_at_the_runs_thread_count(self):
        # every command that loads a checkpoint sets its threads from train.threads (one place)
        out = self.path("runs")
        self.run_ok(["train"] + cc.overrides(CONFIG, **{"run.out_dir": out, "train.threads": "2"}))
        run = os.path.join(out, "default")
        commands = {"lens": ["lens", run, "--tokens", "3 4 5"], "inspect": ["inspect", run, "--tokens", "3 4 5"],
                    "cache": ["cache", run, "--batches", "1", "--hooks", "blocks.0.attn.z"], "ablate": ["ablate", run, "--batches", "1"]}
        for name, args in commands.items():
            with self.subTest(name):
                written = self.path(name + ".h5")
                self.run_ok(args + ["--out", written])
                with h5py.File(written) as f:
                    self.assertEqual(f.attrs["threads"], 2, name)


class SavedConfigs(cc.TempDirTest):
    """A run or checkpoint written before the rule on unread keys (docs/config.md)
    may hold one, e.g. model.rotary_base = 500 with learned positions: it still
    resumes and loads for analysis, the key at its default (it had no effect)."""

    def test_unread_key_in_a_run_and_its_checkpoint(self):
        out = self.path("runs")
        self.run_ok(["train"] + cc.overrides(CONFIG, **{"run.out_dir": out, "train.steps": "20"}))
        run = os.path.join(out, "default")
        old, new = "rotary_base = 10000.0", "rotary_base = 500.0"
        config = os.path.join(run, "config.toml")
        with open(config) as f:
            text = f.read()
        self.assertIn(old, text)
        with open(config, "w") as f:
            f.write(text.replace(old, new).replace("\nsteps = 20\n", "\nsteps = 30\n"))  # and 10 steps more to resume
        checkpoint = os.path.join(run, "checkpoints", sorted(os.listdir(os.path.join(run, "checkpoints")))[-1])
        with h5py.File(checkpoint, "r+") as f:
            f.attrs["config"] = f.attrs["config"].replace(old, new)
        for args in (["eval", checkpoint, "--batches", "1"], ["audit", checkpoint, "--batches", "1"],
                     ["lens", checkpoint, "--tokens", "3 4 5", "--out", self.path("l.h5")]):
            self.run_ok(args)
        r = self.run_ok(["train", "--resume", run])
        self.assertNotIn("rotary_base", r.stderr)
        with open(os.path.join(run, "summary.json")) as f:
            self.assertIn('"steps": 30', f.read())


if __name__ == "__main__":
    cc.main()
