#!/usr/bin/python3
"""What `attnlab report` reads and writes, against hostile inputs.

--out never replaces an input nor anything attnlab wrote into a run or sweep
folder (config, metrics, summaries, checkpoints, logs): one line, exit 2, every
byte and mtime of the folders as it was. Every file the report reads (config.toml,
metrics.h5, summary.json, the audit, the ablation, sweep.toml, summary.h5, a
checkpoint), garbled in each way the report could trip on (not UTF-8, another
JSON or TOML type, another HDF5 shape or type, a missing dataset), gives one line
naming that file and exit 2, never an internal error.

    /usr/bin/python3 tests/report/test_report_inputs.py ATTNLAB_BINARY REPO_ROOT
"""
import glob
import os
import shutil
from unittest import mock

import h5py
import numpy as np

import report_common as rc
from report_common import Fixtures


def tearDownModule():
    Fixtures.cleanup()


def replace_dataset(path, name, data):
    with h5py.File(path, "r+") as f:
        del f[name]
        f[name] = data


def delete(path, name):
    with h5py.File(path, "r+") as f:
        del f[name]


def set_attr(path, name, value):
    with h5py.File(path, "r+") as f:
        f.attrs[name] = value


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


class OutNeverReplaces(rc.cc.TempDirTest):
    """--out on what a run or sweep folder holds: refused, nothing changed."""

    def refused(self, args, folder, expected):
        before = rc.cc.tree_hashes(folder), {p: os.stat(p).st_mtime_ns for p in glob.glob(folder + "/**", recursive=True)}
        r = rc.report(args, self.tmp)
        shown = f"attnlab report {' '.join(args)}\nexit {r.returncode}\n{r.stdout}{r.stderr}"
        self.assertEqual(r.returncode, 2, shown)
        self.assertEqual(r.stdout, "", shown)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, shown)
        self.assertRegex(lines[0], "^attnlab report: " + expected, shown)
        after = rc.cc.tree_hashes(folder), {p: os.stat(p).st_mtime_ns for p in glob.glob(folder + "/**", recursive=True)}
        self.assertEqual(after, before, "the folder changed\n" + shown)

    def test_files_of_a_run(self):
        run = self.path("run")
        shutil.copytree(Fixtures.analysed_run(), run)
        checkpoint = rc.cc.checkpoint_path(run, 40)
        ablation = glob.glob(os.path.join(run, "checkpoints", "*.ablation.h5"))[0]
        for name in ("metrics.h5", "config.toml", "summary.json", "audit.json"):
            with self.subTest(name):
                self.refused([run, "--out", os.path.join(run, name)], run, f"--out .*{name} exists and is not an HTML report")
        for out in (checkpoint, ablation):
            with self.subTest(out):
                self.refused([run, "--out", out], run, ".*exists and is not an HTML report")
        # the attention viewer of the checkpoint, onto the checkpoint itself, or its run's metrics
        self.refused([checkpoint, "--tokens", rc.PROMPT, "--out", checkpoint], run, "--out .* is one of the inputs")
        self.refused([checkpoint, "--tokens", rc.PROMPT, "--out", os.path.join(run, "metrics.h5")], run,
                     ".*metrics.h5 exists and is not an HTML report")
        # new files: only a report, and not among the checkpoints
        self.refused([run, "--out", os.path.join(run, "notes.txt")], run, ".*notes.txt is inside the attnlab folder")
        self.refused([run, "--out", os.path.join(run, "checkpoints", "r.html")], run,
                     ".*checkpoints/r.html is inside .*checkpoints, which attnlab writes")
        # a summary.json the run has yet to write is no place for a report either
        os.remove(os.path.join(run, "summary.json"))
        self.refused([run, "--out", os.path.join(run, "summary.json")], run, ".*summary.json is inside the attnlab folder")

    def test_files_of_a_circuit(self):
        folder = self.path("analyses")
        os.mkdir(folder)
        circuit = os.path.join(folder, "key.circuit.h5")
        shutil.copyfile(Fixtures.circuit("--method", "exact"), circuit)
        self.refused([circuit, "--out", circuit], folder, "--out .*key.circuit.h5 is one of the inputs")
        other = os.path.join(folder, "other.circuit.h5")
        shutil.copyfile(circuit, other)
        self.refused([circuit, "--out", other], folder, "--out .*other.circuit.h5 exists and is not an HTML report")

    def test_files_of_a_sweep(self):
        sweep = self.path("sweep")
        shutil.copytree(Fixtures.sweep(), sweep)
        cell = sorted(n for n in os.listdir(sweep) if n[0].isdigit())[0]
        for out in ("sweep.toml", "summary.csv", "summary.h5", os.path.join("cells", "0.toml"),
                    os.path.join("logs", cell + ".log"), os.path.join(cell, "metrics.h5")):
            with self.subTest(out):
                self.refused([sweep, "--out", os.path.join(sweep, out)], sweep, ".*exists and is not an HTML report")
        for out in (os.path.join("logs", "r.html"), os.path.join("cells", "r.html")):
            with self.subTest(out):
                self.refused([sweep, "--out", os.path.join(sweep, out)], sweep, ".* which attnlab writes")
        self.refused([sweep, "--out", os.path.join(sweep, "table.csv")], sweep, ".*table.csv is inside the attnlab folder")

    def test_other_files_are_kept_and_reports_go_where_they_may(self):
        notes = self.path("notes.txt")
        with open(notes, "w") as f:
            f.write("mine\n")
        run = Fixtures.train("dec", rc.DECODER)
        self.refused([run, "--out", notes], self.tmp, ".*notes.txt exists and is not an HTML report")
        # a report beside the run's files, and one replacing it, are fine
        inside = os.path.join(run, "report.html")
        self.addCleanup(lambda: os.path.exists(inside) and os.remove(inside))
        for _ in range(2):
            r = rc.report([run, "--out", inside], self.tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
        with open(inside, encoding="utf-8") as f:
            self.assertTrue(f.read(15) == "<!DOCTYPE html>")


class GarbledInputs(rc.cc.TempDirTest):
    """Each garbled file: one line naming it, exit 2, no report written."""

    def refused(self, args, file, detail=""):
        out = self.path("r.html")
        self.addCleanup(lambda: os.path.exists(out) and os.remove(out))  # a failed case does not spoil the next
        r = rc.report(list(args) + ["--out", out], self.tmp)
        written = os.path.exists(out)
        if written:
            os.remove(out)
        shown = f"attnlab report {' '.join(args)}\nexit {r.returncode}\n{r.stdout}{r.stderr}"
        self.assertEqual(r.returncode, 2, shown)
        self.assertEqual(r.stdout, "", shown)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, shown)
        self.assertTrue(lines[0].startswith(f"attnlab report: {file}"), shown)
        self.assertIn(detail, lines[0], shown)
        self.assertNotIn("internal error", lines[0], shown)
        self.assertFalse(written, shown)

    def fresh_copy(self, name, source):
        folder = self.path(name)
        if os.path.exists(folder):
            shutil.rmtree(folder)
        shutil.copytree(source, folder)
        return folder

    def fresh_run(self):
        return self.fresh_copy("run", Fixtures.analysed_run())

    def fresh_sweep(self):
        return self.fresh_copy("sweep", Fixtures.sweep())

    def test_run_files(self):
        def ablation_of(run):
            return glob.glob(os.path.join(run, "checkpoints", "*.ablation.h5"))[0]
        cases = [  # file in the run, how it is garbled, what the line says
            ("config.toml", lambda p: write_bytes(p, b'[run]\nname = "\xff\xfe"\n'), "not UTF-8"),
            ("config.toml", lambda p: write_bytes(p, b"model = 3\n"), "model is not a table"),
            ("config.toml", lambda p: write_bytes(p, b"[model\n"), "not valid TOML"),
            ("summary.json", lambda p: write_bytes(p, b'{"steps": 40, "wall_s": "\xff"}'), "not UTF-8"),
            ("summary.json", lambda p: write_bytes(p, b"[1, 2]"), "not a JSON object"),
            ("summary.json", lambda p: write_bytes(p, b'{"eval_loss": "low"}'), "eval_loss"),
            ("summary.json", lambda p: write_bytes(p, b"[" * 100000), ""),
            ("summary.json", lambda p: write_bytes(p, b'{"steps": 4'), "not valid JSON"),
            ("audit.json", lambda p: write_bytes(p, b'{"tests": {"a": 1}}'), "tests is not a JSON array"),
            ("audit.json", lambda p: write_bytes(p, b'{"tests": ["x"]}'), "tests[0]"),
            ("audit.json", lambda p: write_bytes(p, b'{"tests": [], "model": [1]}'), "model"),
            ("audit.json", lambda p: write_bytes(p, b'{"tests": [], "heads": [null]}'), "heads[0]"),
            ("audit.json", lambda p: write_bytes(p, b'\xff{"tests": []}'), "not UTF-8"),
            ("metrics.h5", lambda p: replace_dataset(p, "train/loss", np.zeros((6, 2))), "/train/loss"),
            ("metrics.h5", lambda p: replace_dataset(p, "eval/token_acc", np.array([b"a", b"b"])), "/eval/token_acc"),
            ("metrics.h5", lambda p: replace_dataset(p, "attention/self/entropy", np.zeros(9)), "/attention/self/entropy"),
            ("metrics.h5", lambda p: replace_dataset(p, "attention/self/score_std", np.zeros((9, 3, 1))), "/attention/self"),
            ("metrics.h5", lambda p: delete(p, "eval/loss"), "/eval has no loss"),
            ("metrics.h5", lambda p: set_attr(p, "format", "something-else"), "not an attnlab metrics file"),
            ("metrics.h5", lambda p: write_bytes(p, b"\x89HDF\r\n\x1a\n" + b"\0" * 100), "cannot read as HDF5"),
        ]
        for name, garble, detail in cases:
            with self.subTest(f"{name}: {detail}"):
                run = self.fresh_run()
                garble(os.path.join(run, name))
                self.refused([run], os.path.join(run, name), detail)
        ablation_cases = [
            (lambda p: replace_dataset(p, "ranked/zero_loss", np.zeros((2, 2))), "/ranked/zero_loss"),
            (lambda p: replace_dataset(p, "ranked/kind", np.zeros(2)), "/ranked/kind"),
            (lambda p: replace_dataset(p, "ranked/mean_loss", np.zeros(1)), "different lengths"),
            (lambda p: set_attr(p, "baseline_loss", "high"), "baseline_loss"),
        ]
        for garble, detail in ablation_cases:
            with self.subTest(f"ablation: {detail}"):
                run = self.fresh_run()
                garble(ablation_of(run))
                self.refused([run], ablation_of(run), detail)

    def test_sweep_files(self):
        cases = [
            ("sweep.toml", lambda p: write_bytes(p, b'[sweep]\n"run.seed" = ["\xff"]\n'), "not UTF-8"),
            ("sweep.toml", lambda p: write_bytes(p, b"sweep = [1]\n"), "sweep is not a table"),
            ("summary.h5", lambda p: replace_dataset(p, "cells/name", np.zeros(8)), "/cells/name"),
            ("summary.h5", lambda p: replace_dataset(p, "cells/status", np.array([b"ok"])), "different lengths"),
            ("summary.h5", lambda p: replace_dataset(p, "aggregated/eval_loss", np.array([b"x", b"y"] * 2)),
             "/aggregated/eval_loss"),
            ("summary.h5", lambda p: replace_dataset(p, "aggregated/first_step_at_target", np.zeros((4, 1))),
             "/aggregated/first_step_at_target"),
        ]
        for name, garble, detail in cases:
            with self.subTest(f"{name}: {detail}"):
                sweep = self.fresh_sweep()
                garble(os.path.join(sweep, name))
                self.refused([sweep], os.path.join(sweep, name), detail)

    def test_circuit_file(self):
        def names(values):
            return np.array(values, dtype=h5py.string_dtype())

        def edges(path):
            with h5py.File(path, "r") as f:
                return len(f["edges/score"])
        cases = [  # how the file is garbled, what the line says
            (lambda p: replace_dataset(p, "edges/score", np.zeros((edges(p), 2))), "/edges/score holds float64 of shape"),
            (lambda p: replace_dataset(p, "edges/score", np.full(edges(p), np.nan)), "/edges/score[0] is nan"),
            (lambda p: replace_dataset(p, "edges/exact", np.zeros(3)), "different lengths"),
            (lambda p: replace_dataset(p, "edges/sender", np.zeros(edges(p))), "/edges/sender is not a list of strings"),
            (lambda p: replace_dataset(p, "edges/sender", names(["head 0"] * edges(p))), "/edges/sender[0] is 'head 0'"),
            (lambda p: replace_dataset(p, "edges/receiver", names(["0.0:z"] * edges(p))), "/edges/receiver[0] is '0.0:z'"),
            (lambda p: replace_dataset(p, "edges/sender", names(["99999.0"] * edges(p))), "too many nodes to draw"),
            (lambda p: delete(p, "edges/receiver"), "not a complete circuit file (no /edges/receiver)"),
            (lambda p: delete(p, "edges"), "not a complete circuit file (no /edges)"),
            (lambda p: replace_dataset(p, "circuit/kept", np.full(edges(p), 2, dtype=np.uint8)),
             "/circuit/kept holds values other than 0 and 1"),
            (lambda p: replace_dataset(p, "faithfulness/metric", np.zeros(2)), "/faithfulness holds columns of different"),
            (lambda p: delete(p, "faithfulness/edges_kept"), "no /faithfulness/edges_kept"),
            (lambda p: set_attr(p, "step", "late"), "attribute step"),
            (lambda p: set_attr(p, "clean_metric", np.zeros(2)), "attribute clean_metric"),
            (lambda p: replace_dataset(p, "edges/exact", np.array([b"x"] * edges(p))), "/edges/exact"),
            (lambda p: os.truncate(p, 3000), "cannot read"),
        ]
        for garble, detail in cases:
            with self.subTest(detail):
                path = self.path("key.circuit.h5")
                shutil.copyfile(Fixtures.circuit("--prune", "0.01", "--compare", "exact"), path)
                garble(path)
                self.refused([path], path, detail)
        with self.subTest("no attribute"):
            with h5py.File(path, "w") as f:
                f.attrs["format"] = "attnlab-circuit"
            self.refused([path], path, "not a complete circuit file (no attribute checkpoint)")

    def test_files_that_crash_or_hang_libhdf5(self):
        # tests/fuzz/libhdf5_crashes/: each crashes or hangs libhdf5 (and so h5py)
        # when read whole; the report reads every HDF5 file in a child first
        # (tools/h5_probe.py), so each is one line naming it, within the limit.
        crafted = sorted(glob.glob(os.path.join(rc.cc.REPO_ROOT, "tests", "fuzz", "libhdf5_crashes", "*.h5")))
        self.assertEqual(len(crafted), 3, crafted)
        self.enterContext(mock.patch.dict(os.environ, {"ATTNLAB_H5_PROBE_SECONDS": "2"}))
        for source in crafted:
            for name, fresh in (("metrics.h5", self.fresh_run), ("summary.h5", self.fresh_sweep)):
                with self.subTest(f"{name}: {os.path.basename(source)}"):
                    folder = fresh()
                    shutil.copyfile(source, os.path.join(folder, name))
                    self.refused([folder], os.path.join(folder, name))
            with self.subTest(f"a file given alone: {os.path.basename(source)}"):  # a circuit file, say
                path = self.path("given.circuit.h5")
                shutil.copyfile(source, path)
                self.refused([path], path)

    def test_checkpoint(self):
        run = self.fresh_run()
        checkpoint = rc.cc.checkpoint_path(run, 40)
        with open(checkpoint, "r+b") as f:
            f.truncate(3000)
        self.refused([checkpoint, "--tokens", rc.PROMPT], checkpoint)
        set_attr(rc.cc.checkpoint_path(run, 30), "config", np.bytes_(b'[run]\nname = "\xff"\n'))
        self.refused([rc.cc.checkpoint_path(run, 30), "--tokens", rc.PROMPT], rc.cc.checkpoint_path(run, 30))


if __name__ == "__main__":
    rc.main()
