"""Outputs that replace each other (issue 51, parts 7 and 8).

Two writers of one output: every file a command writes is written under a
temporary name of its own process and given its name by one rename that
replaces only what the command may replace (experiments/files/output_file.h):

  - two `import`s to one new --out, the first stopped (SIGSTOP) while its
    temporary is written and the second run to the end meanwhile: exactly one
    succeeds, the other is refused in one line naming the file (exit 2), and the
    file is the winner's whole checkpoint, with HDF5's file locking on and off
    (HDF5_USE_FILE_LOCKING=FALSE, as on many shared filesystems);
  - two imports started at once, a few times: exactly one succeeds each time;
  - SIGTERM while `export` fills its temporary folder leaves no folder at all.

Analysis outputs never replace each other: a default name carries what tells
two outputs apart (circuit: the pairs file's stem, the method, the metric;
patch: the pairs, the hooks, the metric, ...), and a default output that exists
is kept: the new one goes to NAME-2.h5, ..., and the command says so.

    /usr/bin/python3 tests/cli/test_output_files.py ATTNLAB_BINARY REPO_ROOT
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import h5py
import numpy as np

import cli_common as cc

CONFIG = dict(cc.TINY, **{"model.layers": "2", "train.checkpoint_every": "40"})
# Big enough (about 28 MB of float32) that a checkpoint's write takes a while to catch.
BIG = dict(CONFIG, **{"model.width": "384", "model.heads": "4", "model.layers": "4", "model.ffn": "1536",
                      "train.steps": "1", "train.batch": "2", "train.checkpoint_every": "1"})
CLEAN = "3 9 4 12 5 1 5 12 4"
CORRUPT = "3 8 4 11 5 1 5 12 4"
OTHER = "3 9 4 12 5 1 5 7 4"


def tearDownModule():
    cc.Trained.remove()


def temporaries(folder, name):
    """The temporaries of `name` in `folder` (NAME.<pid>.<random>.tmp, or an older build's NAME.tmp / NAME.tmp-<pid>)."""
    return [n for n in os.listdir(folder) if n.startswith(name + ".") and ("tmp" in n[len(name):])]


def catch_writing(proc, folder, name, timeout=60):
    """Stops `proc` (SIGSTOP) as soon as a temporary of `name` appears in `folder`; whether it was caught mid-write."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if temporaries(folder, name):
            proc.send_signal(signal.SIGSTOP)
            return bool(temporaries(folder, name)) and not os.path.exists(os.path.join(folder, name))
        time.sleep(0.0005)
    return False


def params(path):
    with h5py.File(path, "r") as f:
        return {name: f["params"][name][()] for name in f["params"]}


class TwoWriters(cc.TempDirTest):
    @classmethod
    def setUpClass(cls):
        """Two exports (attnlab's own format) of two different models, to import."""
        cls.root = tempfile.mkdtemp(prefix="attnlab_two_writers_")
        cls.sources = {}
        for seed in (1, 2):
            r = cc.attnlab(["train"] + cc.overrides(BIG, **{"run.out_dir": cls.root, "run.name": f"m{seed}", "run.seed": seed}),
                           cls.root, timeout=300)
            assert r.returncode == 0, r.stderr
            ckpt = cc.checkpoint_path(os.path.join(cls.root, f"m{seed}"), 1)
            folder = os.path.join(cls.root, f"export{seed}")
            r = cc.attnlab(["export", ckpt, "--format", "safetensors", "--out", folder], cls.root, timeout=120)
            assert r.returncode == 0, r.stderr
            cls.sources[seed] = (folder, params(ckpt))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def start_import(self, seed, out, env):
        return subprocess.Popen([cc.ATTNLAB, "import", self.sources[seed][0], "--out", out], cwd=self.tmp, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def assert_one_whole_checkpoint(self, results, out, shown, raced=True):
        """Exactly one import succeeded; the other said in one line that OUT is another's (raced: that another
        process made it while this one ran); OUT is the winner's whole checkpoint."""
        winners = [seed for seed, (rc, _, _) in results.items() if rc == 0]
        self.assertEqual(len(winners), 1, shown)
        (loser, (rc, stdout, stderr)), = [(s, r) for s, r in results.items() if s != winners[0]]
        self.assertEqual(rc, 2, shown)
        self.assertEqual(stdout, "", shown)
        self.assertEqual(stderr.count("\n"), 1, shown)
        self.assertTrue(stderr.startswith("attnlab import: "), shown)
        self.assertIn(out, stderr, shown)
        if raced:
            self.assertIn("was created by another process while this one ran", stderr, shown)
        got = params(out)  # a whole checkpoint: every parameter of the winner's model, bit for bit
        expected = self.sources[winners[0]][1]
        self.assertEqual(sorted(got), sorted(expected), shown)
        for name in expected:
            np.testing.assert_array_equal(got[name], expected[name], name)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["out.h5"], "a temporary was left\n" + shown)

    def test_two_imports_to_one_out_one_stopped_while_writing(self):
        for locking in ("TRUE", "FALSE"):
            with self.subTest(hdf5_file_locking=locking):
                env = dict(cc.env(), HDF5_USE_FILE_LOCKING=locking)
                out = self.path("out.h5")
                for attempt in range(5):  # the first import must be caught between its check and its rename
                    for name in os.listdir(self.tmp):
                        os.remove(self.path(name))
                    first = self.start_import(1, out, env)
                    caught = catch_writing(first, self.tmp, "out.h5")
                    if caught:
                        break
                    first.send_signal(signal.SIGCONT)
                    first.communicate(timeout=120)
                self.assertTrue(caught, "the first import was never caught while writing its temporary")
                second = self.start_import(2, out, env)
                second_out, second_err = second.communicate(timeout=120)
                first.send_signal(signal.SIGCONT)
                first_out, first_err = first.communicate(timeout=120)
                results = {1: (first.returncode, first_out, first_err), 2: (second.returncode, second_out, second_err)}
                shown = "\n".join(f"import {s}: exit {rc}\nstdout: {o!r}\nstderr: {e!r}" for s, (rc, o, e) in results.items())
                self.assert_one_whole_checkpoint(results, out, shown)

    def test_two_imports_started_at_once(self):
        out = self.path("out.h5")
        for attempt in range(3):
            for name in os.listdir(self.tmp):
                os.remove(self.path(name))
            procs = {seed: self.start_import(seed, out, cc.env()) for seed in (1, 2)}
            results = {}
            for seed, proc in procs.items():
                o, e = proc.communicate(timeout=120)
                results[seed] = (proc.returncode, o, e)
            shown = "\n".join(f"import {s}: exit {rc}\nstdout: {o!r}\nstderr: {e!r}" for s, (rc, o, e) in results.items())
            self.assert_one_whole_checkpoint(results, out, shown, raced=False)

    def test_sigterm_during_export_leaves_no_folder(self):
        ckpt = cc.checkpoint_path(os.path.join(self.root, "m1"), 1)
        for attempt in range(5):
            proc = subprocess.Popen([cc.ATTNLAB, "export", ckpt, "--format", "hf", "--out", self.path("exp")], cwd=self.tmp,
                                    env=cc.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            caught = catch_writing(proc, self.tmp, "exp")
            if caught:
                proc.send_signal(signal.SIGTERM)
                proc.send_signal(signal.SIGCONT)
            proc.communicate(timeout=120)
            if caught:
                break
            shutil.rmtree(self.path("exp"), ignore_errors=True)
        self.assertTrue(caught, "export was never caught while filling its temporary folder")
        self.assertEqual(proc.returncode, -signal.SIGTERM)
        self.assertEqual(os.listdir(self.tmp), [], "SIGTERM left a folder behind")


class DefaultOutputs(cc.TempDirTest):
    def setUp(self):
        super().setUp()
        self.ckpt = self.path("step_0000040.h5")  # the default outputs go beside it
        shutil.copy(cc.Trained.checkpoint("decoder", CONFIG), self.ckpt)
        for name, corrupt in (("key", CORRUPT), ("value", OTHER)):
            with h5py.File(self.path(f"{name}.h5"), "w") as f:
                f["clean"] = np.array([[int(t) for t in CLEAN.split()]] * 2)
                f["corrupt"] = np.array([[int(t) for t in corrupt.split()]] * 2)
                f["positions"] = np.array([[8], [8]])
                f["clean_answers"] = np.array([[9], [9]])
                f["corrupt_answers"] = np.array([[int(corrupt.split()[-2])]] * 2)

    def outputs(self):
        return sorted(set(os.listdir(self.tmp)) - {"step_0000040.h5", "key.h5", "value.h5"})

    def wrote(self, args):
        r = self.run_ok(args)
        line = [line for line in r.stdout.splitlines() if line.startswith("wrote ")]
        self.assertEqual(len(line), 1, r.stdout)
        return line[0]

    def test_circuit_once_per_method_keeps_every_file(self):
        for method in ("exact", "atp", "eap"):
            self.wrote(["circuit", self.ckpt, "--pairs", self.path("key.h5"), "--metric", "prob", "--method", method])
        self.wrote(["circuit", self.ckpt, "--pairs", self.path("value.h5"), "--metric", "prob", "--method", "exact"])
        self.assertEqual(self.outputs(), ["step_0000040.circuit.key.atp.prob.h5", "step_0000040.circuit.key.eap.prob.h5",
                                          "step_0000040.circuit.key.exact.prob.h5", "step_0000040.circuit.value.exact.prob.h5"])
        for name in self.outputs():
            with h5py.File(self.path(name)) as f:
                self.assertEqual(f.attrs["method"], name.split(".")[3])

    def test_patch_on_key_and_value_pairs_keeps_both(self):
        self.wrote(["patch", self.ckpt, "--pairs", self.path("key.h5"), "--hooks", "z,k", "--metric", "prob"])
        self.wrote(["patch", self.ckpt, "--pairs", self.path("value.h5"), "--hooks", "z,k", "--metric", "prob"])
        self.wrote(["patch", self.ckpt, "--pairs", self.path("value.h5"), "--hooks", "v", "--per-position", "--metric", "prob"])
        self.wrote(["patch", self.ckpt, "--clean", CLEAN, "--corrupt", CORRUPT, "--answers", "9:8", "--noising"])
        self.assertEqual(self.outputs(), ["step_0000040.patch.key.z+k.prob.h5", "step_0000040.patch.value.v.prob.per-position.h5",
                                          "step_0000040.patch.value.z+k.prob.h5", "step_0000040.patch.z.norm_logit_diff.noising.h5"])

    def test_an_existing_default_output_is_kept_and_the_command_says_so(self):
        commands = {
            "circuit": (["circuit", self.ckpt, "--pairs", self.path("key.h5"), "--metric", "prob"],
                        "step_0000040.circuit.key.exact.prob"),
            "patch": (["patch", self.ckpt, "--pairs", self.path("key.h5"), "--metric", "prob"], "step_0000040.patch.key.z.prob"),
            "lens": (["lens", self.ckpt, "--tokens", CLEAN], "step_0000040.lens"),
            "decompose": (["decompose", self.ckpt, "--tokens", CLEAN, "--head", "1.0", "--query", "8", "--key", "3"],
                          "step_0000040.parts.L1H0.q8.k3"),
            "ablate": (["ablate", self.ckpt, "--batches", "1"], "step_0000040.ablation"),
            "heads": (["heads", self.ckpt, "--rows", "4"], "step_0000040.heads"),
        }
        for command, (args, stem) in commands.items():
            with self.subTest(command=command):
                self.assertEqual(self.wrote(args), f"wrote {self.path(stem + '.h5')}")
                with open(self.path(stem + ".h5"), "rb") as f:
                    first = f.read()
                self.assertEqual(self.wrote(args), f"wrote {self.path(stem + '-2.h5')} ({self.path(stem + '.h5')} exists and is "
                                                   "kept; --out chooses the name)")
                with open(self.path(stem + ".h5"), "rb") as f:
                    self.assertEqual(f.read(), first, "the first output changed")
                # a file of the user's own at the default name is kept too
                with open(self.path(stem + "-3.h5"), "w") as f:
                    f.write("mine")
                self.assertEqual(self.wrote(args).split(" (")[0], f"wrote {self.path(stem + '-4.h5')}")
                with open(self.path(stem + "-3.h5")) as f:
                    self.assertEqual(f.read(), "mine")
        self.assertFalse([n for n in os.listdir(self.tmp) if n.endswith(".tmp")])


if __name__ == "__main__":
    cc.main()
