"""Shared helpers for the process-level tests of the attnlab binary (tests/cli/).

Each test script is run by CTest as

    /usr/bin/python3 tests/cli/test_X.py ATTNLAB_BINARY REPO_ROOT

and uses plain unittest (Debian's python3 with h5py and numpy; no pytest).
Every test case works in a temporary directory of its own, removed afterwards.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

ATTNLAB = None    # path of the attnlab binary (argv[1])
REPO_ROOT = None  # repository root (argv[2])

# A tiny experiment: a few hundred milliseconds on one core.
TINY = {
    "model.width": "16",
    "model.heads": "2",
    "model.layers": "1",
    "model.ffn": "32",
    "train.steps": "40",
    "train.batch": "8",
    "train.log_every": "5",
    "train.eval_every": "20",
    "train.checkpoint_every": "10",
    "train.eval_batches": "1",
}

# The same as a TOML document (sections in the order [task], [model], [train]).
TINY_SECTIONS = {
    "task": {},
    "model": {"width": "16", "heads": "2", "layers": "1", "ffn": "32"},
    "train": {"steps": "40", "batch": "8", "log_every": "5", "eval_every": "20",
              "checkpoint_every": "10", "eval_batches": "1"},
}


def overrides(base=None, **changes):
    """key=value arguments: `base` (default TINY) updated with `changes` (dots as '__')."""
    merged = dict(TINY if base is None else base)
    for key, value in changes.items():
        merged[key.replace("__", ".")] = str(value)
    return [f"{k}={v}" for k, v in merged.items()]


def setup_from_argv():
    """Takes ATTNLAB_BINARY REPO_ROOT off argv and leaves the rest for unittest."""
    global ATTNLAB, REPO_ROOT
    if len(sys.argv) < 3:
        sys.exit(f"usage: {sys.argv[0]} ATTNLAB_BINARY REPO_ROOT [unittest args]")
    ATTNLAB = os.path.abspath(sys.argv[1])
    REPO_ROOT = os.path.abspath(sys.argv[2])
    if not os.access(ATTNLAB, os.X_OK):
        sys.exit(f"{ATTNLAB}: not an executable")
    del sys.argv[1:3]


def main():
    setup_from_argv()
    unittest.main(verbosity=2)


def env():
    e = dict(os.environ)
    e["OPENBLAS_NUM_THREADS"] = "1"
    e["OMP_NUM_THREADS"] = "1"
    return e


def attnlab(args, cwd, timeout=60):
    """Runs attnlab to completion: CompletedProcess with text stdout/stderr."""
    return subprocess.run([ATTNLAB] + list(args), cwd=cwd, env=env(), capture_output=True, text=True,
                          encoding="utf-8", errors="replace", timeout=timeout)


def start(args, cwd, log_name="attnlab.log"):
    """Starts attnlab in the background, stdout and stderr into cwd/log_name."""
    log = open(os.path.join(cwd, log_name), "w")
    proc = subprocess.Popen([ATTNLAB] + list(args), cwd=cwd, env=env(), stdout=log, stderr=subprocess.STDOUT)
    proc.log_file = log
    proc.log_path = os.path.join(cwd, log_name)
    return proc


def finish(proc, timeout=60):
    try:
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.log_file.close()
    with open(proc.log_path) as f:
        return rc, f.read()


CHECKPOINT_NAME = re.compile(r"step_(\d{7,18})\.h5$")


def checkpoint_steps(run_dir):
    """Steps of the complete checkpoints in run_dir/checkpoints (no .tmp files), sorted."""
    folder = os.path.join(run_dir, "checkpoints")
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for m in map(CHECKPOINT_NAME.match, names) if m)


def checkpoint_path(run_dir, step):
    return os.path.join(run_dir, "checkpoints", f"step_{step:07d}.h5")


def wait_for(predicate, proc, timeout=60, interval=0.002):
    """Polls predicate() until it is true; fails if proc exits first or on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc is not None and proc.poll() is not None:
            return predicate()
        time.sleep(interval)
    return False


def tree_hashes(root):
    """{relative path: sha256} of every file under root (and every directory, as 'dir')."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(folder, d), root)] = "dir"
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def run_refused(test, args, cwd, runs, wants, before):
    """Runs attnlab `args` in `cwd` and asserts what bad input must give: exit 2,
    nothing on stdout, exactly one line `attnlab CMD: ...` holding every string of
    `wants`, no new folder in `runs` (removed again if one appears), nothing left
    in `cwd`, and every folder of `before` ({folder: tree_hashes}) unchanged.
    Returns (the line, the text shown on a failure)."""
    runs_before = set(os.listdir(runs))
    try:
        r = attnlab(args, cwd, timeout=30)
    finally:  # keeps a wrongly accepted command from spoiling the later cases
        created = set(os.listdir(runs)) - runs_before
        for extra in created:
            shutil.rmtree(os.path.join(runs, extra), ignore_errors=True)
    shown = f"attnlab {' '.join(args)}\nexit {r.returncode}\nstdout: {r.stdout!r}\nstderr: {r.stderr!r}"
    test.assertEqual(r.returncode, 2, shown)
    test.assertEqual(r.stdout, "", shown)
    test.assertTrue(r.stderr.endswith("\n") and r.stderr.count("\n") == 1, "not exactly one line:\n" + shown)
    line = r.stderr.rstrip("\n")
    test.assertTrue(line.startswith(f"attnlab {args[0]}: "), shown)
    for want in wants:
        test.assertIn(want, line, shown)
    # Nothing created, nothing damaged.
    test.assertEqual(created, set(), f"a run directory was created\n{shown}")
    test.assertEqual(os.listdir(cwd), [], f"files left in the working directory\n{shown}")
    for folder, hashes in before.items():
        test.assertEqual(tree_hashes(folder), hashes, f"{folder} changed\n{shown}")
    return line, shown


class Trained:
    """Tiny runs trained once per test file, by label: checkpoint(label, config)
    trains `config` (overrides as cli_common.overrides takes) the first time and
    returns the path of its last checkpoint (at train.steps). remove() deletes them."""
    root = None
    checkpoints = {}

    @classmethod
    def checkpoint(cls, label, config):
        if label not in cls.checkpoints:
            if cls.root is None:
                cls.root = tempfile.mkdtemp(prefix="attnlab_trained_")
            out = os.path.join(cls.root, label)
            r = attnlab(["train"] + overrides(config, **{"run.out_dir": out}), cls.root, timeout=120)
            assert r.returncode == 0, r.stderr
            cls.checkpoints[label] = checkpoint_path(os.path.join(out, "default"), int(config["train.steps"]))
        return cls.checkpoints[label]

    @classmethod
    def remove(cls):
        """Deletes them; a later checkpoint() call trains again."""
        if cls.root:
            shutil.rmtree(cls.root, ignore_errors=True)
        cls.root = None
        cls.checkpoints = {}


class TempDirTest(unittest.TestCase):
    """Each test method runs in a fresh temporary directory, self.tmp."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="attnlab_cli_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def run_ok(self, args, cwd=None, timeout=60):
        r = attnlab(args, cwd or self.tmp, timeout)
        self.assertEqual(r.returncode, 0, f"attnlab {' '.join(args)} failed:\n{r.stderr}")
        return r


def open_metrics(path):
    import h5py
    return h5py.File(path, "r", libver="latest", swmr=True)
