"""Bad arguments to the training benchmarks: one line naming what, exit status 2,
nothing printed on stdout (no half JSON).

    /usr/bin/python3 tests/bench/test_bench_inputs.py BENCH_TRAIN REPO_ROOT
"""
import subprocess
import sys
import unittest

BENCH_TRAIN = None  # build/bench/bench_train (argv[1])
REPO_ROOT = None    # repository root (argv[2])


def run(command):
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


class BenchTrainRefuses(unittest.TestCase):
    def check(self, args, message):
        r = run([BENCH_TRAIN] + args)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr.strip().splitlines(), ["bench_train: " + message])

    def test_unknown_device(self):
        self.check(["--workload", "train", "--device", "gpu"], '[bench_train] --device must be cpu or cuda, got "gpu"')

    def test_cuda_without_a_device(self):
        probe = run([BENCH_TRAIN, "--workload", "train", "--size", "small", "--device", "cuda", "--seconds", "0.1",
                     "--warmup", "0", "--min-reps", "1"])
        if probe.returncode == 0:
            self.skipTest("a CUDA device is present: --device cuda ran")
        self.assertEqual(probe.returncode, 2, probe.stderr)
        self.assertEqual(probe.stdout, "")
        lines = probe.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, probe.stderr)
        self.assertTrue(lines[0].startswith("bench_train: [cuda] bench_train --device: "), lines[0])


class BenchTrainPyRefuses(unittest.TestCase):
    def test_cuda_without_a_device(self):
        import torch
        if torch.cuda.is_available():
            self.skipTest("torch sees a CUDA device")
        r = run(["/usr/bin/python3", REPO_ROOT + "/bench/bench_train.py", "--workload", "train", "--device", "cuda"])
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertIn("bench_train.py: error: --device cuda: this torch sees no CUDA device", r.stderr)

    def test_cuda_is_for_training_only(self):
        r = run(["/usr/bin/python3", REPO_ROOT + "/bench/bench_train.py", "--workload", "mha", "--device", "cuda"])
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertIn("--device cuda is for --workload train", r.stderr)


if __name__ == "__main__":
    BENCH_TRAIN, REPO_ROOT = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1])
