"""Crafted HDF5 files that crash or hang libhdf5 1.10.8 itself
(tests/fuzz/libhdf5_crashes/: a segfault in H5F__accum_read, a bad free in
H5G__link_release_table, an endless loop in H5HG_read) end, through every
command that reads an HDF5 file, with exit status 2 and one line naming the
file and what libhdf5 did, within the probe's time limit; nothing is written
and no run changes (issue 27; data/h5_probe.h reads the file in a child
process first). Without the probe each of these commands dies by SIGSEGV or
hangs.

    /usr/bin/python3 tests/cli/test_libhdf5_crashes.py ATTNLAB_BINARY REPO_ROOT
"""
import os
import shutil
import tempfile
import time
import unittest

import cli_common as cc

PROBE_SECONDS = 2  # the hang costs this much per command
CRASH = "libhdf5 crashed reading this file (signal SIG"
HANG = f"libhdf5 did not finish reading this file within {PROBE_SECONDS} s"


def reproducers():
    folder = os.path.join(cc.REPO_ROOT, "tests", "fuzz", "libhdf5_crashes")
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".h5"))


def expected(path):
    """What the line may say about a reproducer. The dense-link one frees
    pointers it never set: depending on what the heap held there, the child
    dies (SIGSEGV, SIGABRT) or HDF5 reports a checksum error; either way the
    caller's process never opened the file."""
    name = os.path.basename(path)
    if name.startswith("hang-"):
        return [HANG]
    if "dense-links" in name:
        return [CRASH, "cannot list members (HDF5: "]
    return [CRASH]


class LibHdf5Crashes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["ATTNLAB_H5_PROBE_SECONDS"] = str(PROBE_SECONDS)  # cc.env() passes it on
        cls.tmp = tempfile.mkdtemp(prefix="attnlab_cli_libhdf5_")
        cls.files = reproducers()
        assert len(cls.files) >= 3, cls.files
        # A real run whose files the crafted ones replace (resume cases).
        cls.runs = os.path.join(cls.tmp, "runs")
        os.makedirs(cls.runs)
        r = cc.attnlab(["train"] + cc.overrides(**{"run.out_dir": cls.runs, "run.name": "base"}), cls.tmp)
        assert r.returncode == 0, r.stderr
        cls.base = os.path.join(cls.runs, "base")
        cls.good = cc.checkpoint_path(cls.base, int(cc.TINY["train.steps"]))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        os.environ.pop("ATTNLAB_H5_PROBE_SECONDS", None)

    def refused(self, args, prefix, alternatives, before=None):
        """run_refused in an empty working directory (one line starting with
        `prefix` after the command's name, saying one of `alternatives`),
        timed: the hang must end at the probe's limit, not the harness's."""
        cwd = tempfile.mkdtemp(dir=self.tmp)
        try:
            start = time.monotonic()
            line, shown = cc.run_refused(self, args, cwd, self.runs, [prefix], before or {})
            self.assertLess(time.monotonic() - start, PROBE_SECONDS + 15, shown)
            self.assertTrue(line.startswith(f"attnlab {args[0]}: {prefix}"), shown)
            self.assertTrue(any(a in line for a in alternatives), shown)
        finally:
            shutil.rmtree(cwd, ignore_errors=True)

    def test_eval_and_audit_of_each_reproducer(self):
        for path in self.files:
            for command in ("eval", "audit"):
                with self.subTest(file=os.path.basename(path), command=command):
                    self.refused([command, path], f"[checkpoint] {path}: ", expected(path))

    def test_other_checkpoint_readers(self):
        for path in self.files:
            for args in (["generate", path, "--prompt", "3 4"], ["lens", path, "--tokens", "3 4"]):
                with self.subTest(file=os.path.basename(path), command=args[0]):
                    self.refused(args, f"[checkpoint] {path}: ", expected(path))

    def test_other_inputs(self):
        # This reproducer crashes every reader: its root group's link lookup does.
        path = [p for p in self.files if "accum-read" in p][0]
        out = os.path.join(self.tmp, "never.h5")  # a new file in an existing folder: the input is what fails
        cases = [
            (["inspect", self.good, "--input", path, "--out", out], "[inspect]"),
            (["patch", self.good, "--pairs", path], "[pairs]"),
            (["train"] + cc.overrides(**{"task.name": "file", "task.vocab": "32", "task.path": path,
                                          "run.out_dir": self.runs, "run.name": "tokens"}), "[token_file]"),
        ]
        for args, tag in cases:
            with self.subTest(command=args[0]):
                self.refused(args, f"{tag} {path}: ", [CRASH], {self.base: cc.tree_hashes(self.base)})
        self.assertFalse(os.path.exists(out))

    def test_resume_from_a_crafted_checkpoint(self):
        for path in self.files:
            with self.subTest(file=os.path.basename(path)):
                run = os.path.join(self.runs, "crafted")
                shutil.copytree(self.base, run)
                try:
                    newest = cc.checkpoint_path(run, int(cc.TINY["train.steps"]))
                    shutil.copy(path, newest)
                    self.refused(["train", "--resume", run], f"[checkpoint] {newest}: ", expected(path),
                                 {run: cc.tree_hashes(run)})
                finally:
                    shutil.rmtree(run, ignore_errors=True)

    def test_the_real_files_still_read(self):
        # The control: the same commands on the run's own checkpoint succeed.
        for command in ("eval", "audit"):
            r = cc.attnlab([command, self.good], self.tmp)
            self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    cc.main()
