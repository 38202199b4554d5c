"""A run's numbers do not depend on the CPU's instruction set.

The default experiment (products of up to 2^25 multiply-adds, LayerNorm, GELU,
softmax) is trained for a few steps under every instruction set this machine
runs (ATTNLAB_ISA: avx512, avx2, generic; autograd/cpu/kernels.h), each as a
machine of that kind would run it: libxsmm generates that set's kernels
(LIBXSMM_TARGET) and OpenBLAS runs that set's code (OPENBLAS_CORETYPE). The
training series (/train/loss, /train/grad_norm) and the final parameters must be
the same bits under every set. Before the float32 products had one order of
addition, an AVX2 machine sent products above 2^21 multiply-adds to OpenBLAS
and ended the configs' claims elsewhere (issue 51).
"""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_common as cc  # noqa: E402

STEPS = 6
# ATTNLAB_ISA -> how a CPU of that set runs libxsmm and OpenBLAS
MACHINES = {
    "avx512": {"LIBXSMM_TARGET": "skx", "OPENBLAS_CORETYPE": "SkylakeX"},
    "avx2": {"LIBXSMM_TARGET": "hsw", "OPENBLAS_CORETYPE": "Haswell"},
    "generic": {"LIBXSMM_TARGET": "generic", "OPENBLAS_CORETYPE": "Prescott"},
}


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def sets_this_cpu_runs():
    flags = cpu_flags()
    sets = ["generic"]
    if {"avx2", "fma"} <= flags:
        sets.append("avx2")
    if {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= flags:
        sets.append("avx512")
    return sets


def series(run):
    with h5py.File(os.path.join(run, "metrics.h5"), "r") as f:
        return {name: f[name][()] for name in ("train/step", "train/loss", "train/grad_norm")}


def final_params(run):
    with h5py.File(cc.checkpoint_path(run, STEPS), "r") as f:
        out = {}
        f["params"].visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        return out


class SameBitsOnEveryInstructionSet(cc.TempDirTest):
    def train(self, isa, extra):
        out = self.path(isa)
        env = cc.env()
        env.update(MACHINES[isa], ATTNLAB_ISA=isa)
        args = ["train", f"run.out_dir={out}", f"train.steps={STEPS}", "train.log_every=1", f"train.checkpoint_every={STEPS}",
                "train.eval_every=1000", "train.threads=1"] + extra
        r = cc.subprocess.run([cc.ATTNLAB] + args, cwd=self.tmp, env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, f"ATTNLAB_ISA={isa} attnlab {' '.join(args)}:\n{r.stderr}")
        return os.path.join(out, "default")

    def check(self, extra):
        sets = sets_this_cpu_runs()
        runs = {isa: self.train(isa, extra) for isa in sets}
        widest = sets[-1]
        want_series, want_params = series(runs[widest]), final_params(runs[widest])
        for isa in sets[:-1]:
            got_series, got_params = series(runs[isa]), final_params(runs[isa])
            for name, values in want_series.items():
                self.assertTrue(np.array_equal(values.view(np.uint8), got_series[name].view(np.uint8)),
                                f"{name}: {isa} {got_series[name]} against {widest} {values}")
            self.assertEqual(sorted(want_params), sorted(got_params))
            for name, values in want_params.items():
                differ = int(np.sum(values.view(np.uint32) != got_params[name].view(np.uint32)))
                self.assertEqual(differ, 0, f"params/{name}: {differ} of {values.size} values differ between {isa} and {widest}")

    def test_default_experiment(self):
        self.check([])

    def test_rmsnorm_rotary_gelu_tanh_and_a_wide_output_layer(self):
        # other paths: RMSNorm, rotary positions, GPT-2's composed activation, a 300-token output layer
        self.check(["model.norm_type=\"rmsnorm\"", "model.positional=\"rotary\"", "model.activation=\"gelu_tanh\"",
                    "task.name=\"copy\"", "task.vocab=300", "model.width=96", "model.heads=3"])


class BadSetting(cc.TempDirTest):
    def test_an_unknown_or_too_wide_setting_is_one_line_and_exit_2(self):
        too_wide = [] if sets_this_cpu_runs()[-1] == "avx512" else ["avx512"]
        for name, value in [("ATTNLAB_ISA", "avx1024")] + [("ATTNLAB_ISA", v) for v in too_wide] + [("ATTNLAB_GEMM", "quick")]:
            env = cc.env()
            env[name] = value
            out = self.path("runs")
            r = cc.subprocess.run([cc.ATTNLAB, "train", f"run.out_dir={out}"], cwd=self.tmp, env=env, capture_output=True,
                                  text=True, timeout=60)
            self.assertEqual(r.returncode, 2, r.stderr)
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, r.stderr)
            self.assertIn(name, lines[0])
            self.assertFalse(os.path.exists(out), "nothing is written")


if __name__ == "__main__":
    cc.main()
