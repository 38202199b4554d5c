"""Shared helpers for the process-level tests of `attnlab sweep` (tests/sweep/).

CTest runs each script as

    /usr/bin/python3 tests/sweep/test_X.py ATTNLAB_BINARY [unittest args]

with plain unittest (Debian's python3 with h5py and numpy; no pytest). Every test
method works in a temporary directory of its own, removed afterwards; the sweep
writes into TMP/out (run.out_dir is relative, the sweep runs with cwd = TMP).

The experiment is tiny (copy task, width 16, one layer, 60 steps of batch 8):
a cell trains in about a tenth of a second on one core.
"""
import csv
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import cli_common as cli  # noqa: E402  (the process helpers of tests/cli/)

ATTNLAB = None  # the attnlab binary (argv[1])

# The tiny base experiment, section -> key -> TOML value text.
BASE = {
    "run": {"name": '"tiny"', "out_dir": '"out"'},
    "task": {"name": '"copy"', "vocab": "12", "min_len": "2", "max_len": "4"},
    "model": {"width": "16", "heads": "2", "layers": "1", "ffn": "32"},
    "train": {"steps": "60", "batch": "8", "log_every": "10", "eval_every": "30",
              "checkpoint_every": "30", "eval_batches": "1"},
}

# summary.json fields the sweep copies into its table, one column each.
SUMMARY_COLUMNS = ["eval_loss", "eval_token_acc", "eval_seq_acc", "wall_s", "tokens_per_s"]


def config_text(sweep=None, **changes):
    """The tiny config as TOML. `changes`: section__key=value_text (None removes the key).
    `sweep`: list of (key, TOML array text), written as the [sweep] table (None: no table)."""
    sections = {name: dict(keys) for name, keys in BASE.items()}
    for dotted, value in changes.items():
        section, key = dotted.split("__", 1)
        if value is None:
            sections.setdefault(section, {}).pop(key, None)
        else:
            sections.setdefault(section, {})[key] = value
    out = []
    for name, keys in sections.items():
        out.append(f"[{name}]")
        out += [f"{k} = {v}" for k, v in keys.items()]
    if sweep is not None:
        out.append("[sweep]")
        out += [f'"{k}" = {v}' for k, v in sweep]
    return "\n".join(out) + "\n"


def setup_from_argv():
    global ATTNLAB
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} ATTNLAB_BINARY [unittest args]")
    ATTNLAB = os.path.abspath(sys.argv[1])
    if not os.access(ATTNLAB, os.X_OK):
        sys.exit(f"{ATTNLAB}: not an executable")
    cli.ATTNLAB = ATTNLAB  # cli.attnlab runs it
    del sys.argv[1]


def main():
    setup_from_argv()
    unittest.main(verbosity=2)


env = cli.env  # one thread for OpenBLAS, as every process test runs


def attnlab(args, cwd, timeout=120):
    return cli.attnlab(args, cwd, timeout)


def shown(args, r):
    return f"attnlab {' '.join(args)}\nexit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"


def tree_state(root):
    """{relative path: (sha256, mtime_ns)} of every file under root, 'dir' for folders."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(folder, d), root)] = "dir"
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, root)] = (digest, os.stat(path).st_mtime_ns)
    return out


def read_json(path):
    with open(path) as f:
        return json.load(f)


def csv_number(text):
    return math.nan if text == "" else float(text)


def g10(x):
    """x as the CSV prints it (10 significant digits), read back; NaN for null."""
    return math.nan if x is None else float(f"{x:.10g}")


def same(a, b, rel=0.0):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def read_csv_rows(path):
    """The raw rows of summary.csv as Python's csv module reads them (RFC 4180)."""
    with open(path, newline="") as f:
        return list(csv.reader(f))


def read_summary_csv(path):
    """summary.csv as (header, cell rows, aggregate rows), each row a dict by header.

    Tolerant of one known defect: a cell name holding unquoted commas
    ("0_model.heads=1,run.seed=0") splits into several fields. Only the name
    column can do that in these tests, so the extra fields are joined back into
    it; test_summary_csv_is_well_formed checks the file itself."""
    rows = read_csv_rows(path)
    header, cells, aggregates = rows[0], [], []
    for row in rows[1:]:
        extra = len(row) - len(header)
        if extra > 0:
            row = row[:1] + [",".join(row[1:2 + extra])] + row[2 + extra:]
        if len(row) != len(header):
            raise AssertionError(f"{path}: a row of {len(row)} fields under a header of {len(header)}: {row}")
        d = dict(zip(header, row))
        (cells if d["row"] == "cell" else aggregates).append(d)
    return header, cells, aggregates


def read_summary_h5(path):
    """summary.h5 as {group: {dataset or keys/<key>: list}} (strings decoded)."""
    out = {}
    with h5py.File(path, "r") as f:
        out["attrs"] = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        for group in ("cells", "aggregated"):
            g = f[group]
            d = {}

            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    data = obj[()]
                    if data.dtype.kind in "OS":
                        d[name] = [x.decode() if isinstance(x, bytes) else str(x) for x in data]
                    else:
                        d[name] = [float(x) for x in np.asarray(data, dtype=np.float64)]
            g.visititems(visit)
            out[group] = d
    return out


def h5_differences(a, b):
    """The datasets (group/name) whose values differ between two read_summary_h5 results (NaN == NaN)."""
    out = []
    for group in ("cells", "aggregated"):
        for name in sorted(set(a[group]) | set(b[group])):
            x, y = a[group].get(name), b[group].get(name)
            if x is None or y is None or len(x) != len(y):
                out.append(f"{group}/{name}")
            elif any(not (same(u, v) if isinstance(u, float) else u == v) for u, v in zip(x, y)):
                out.append(f"{group}/{name}: {x} != {y}")
    if a["attrs"] != b["attrs"]:
        out.append(f"attrs: {a['attrs']} != {b['attrs']}")
    return out


class SweepTest(unittest.TestCase):
    """Each test method runs in a fresh temporary directory, self.tmp."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="attnlab_sweep_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def write_config(self, text, name="sweep.toml"):
        with open(self.path(name), "w") as f:
            f.write(text)
        return name

    def sweep(self, config, *extra, expect=0):
        args = ["sweep", config] + list(extra)
        r = attnlab(args, self.tmp)
        if expect is not None:
            self.assertEqual(r.returncode, expect, shown(args, r))
        r.shown = shown(args, r)
        return r

    def sweep_dir(self, name="tiny"):
        return self.path("out", name)
