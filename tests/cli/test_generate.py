"""`attnlab generate CHECKPOINT --prompt "..."` on checkpoints of tiny training
runs, one per model kind: greedy decoding with --check-cache passes, seeded
sampling is reproducible, --top-k 1 is greedy, the positional table caps
decoding, bad input exits 2 with one line, a broken (NaN) checkpoint is refused
on load (exit 2, one line).

    /usr/bin/python3 tests/cli/test_generate.py ATTNLAB_BINARY REPO_ROOT
"""
import os
import re
import shutil
import tempfile
import unittest

import h5py
import numpy as np

import cli_common as cc

VOCAB = 32  # the default task.vocab
STEP_LINE = re.compile(r"^step (\d+): max \|cached - full\| = (\S+) \(limit (\S+)\)$")
CHECK_LINE = re.compile(r"^cache check: (\d+) steps, max \|cached - full\| = (\S+)$")


def tokens_line(stdout):
    """(prompt, generated) from the `PROMPT | GENERATED` line."""
    lines = [l for l in stdout.splitlines() if "|" in l and not l.startswith(("step ", "cache check"))]
    assert len(lines) == 1, stdout
    left, right = lines[0].split("|")
    return [int(t) for t in left.split()], [int(t) for t in right.split()]


class GenerateBase(unittest.TestCase):
    """Trains one tiny run for the class; its last checkpoint is cls.checkpoint."""
    extra = {}

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnlab_generate_")
        out = os.path.join(cls.tmp, "runs")
        args = ["train"] + cc.overrides(**{"run.out_dir": out}, **cls.extra)
        r = cc.attnlab(args, cls.tmp)
        if r.returncode != 0:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise RuntimeError(f"attnlab {' '.join(args)} failed:\n{r.stderr}")
        run_dir = os.path.join(out, "default")
        cls.checkpoint = cc.checkpoint_path(run_dir, cc.checkpoint_steps(run_dir)[-1])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def generate(self, *args, rc=0, checkpoint=None):
        argv = ["generate", checkpoint or self.checkpoint] + list(args)
        r = cc.attnlab(argv, self.tmp)
        self.assertEqual(r.returncode, rc, f"attnlab {' '.join(argv)}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
        return r

    def check_cache_output(self, stdout, steps):
        lines = stdout.strip().splitlines()
        step_lines = [STEP_LINE.match(l) for l in lines[:-2]]
        self.assertTrue(all(step_lines), stdout)
        self.assertEqual([int(m.group(1)) for m in step_lines], list(range(steps)), stdout)
        for m in step_lines:  # the limit scales with the logits: 1e-5 max(1, max |logit|)
            self.assertGreaterEqual(float(m.group(3)), 1e-5, stdout)
            self.assertLessEqual(float(m.group(2)), float(m.group(3)), stdout)
        final = CHECK_LINE.match(lines[-1])
        self.assertIsNotNone(final, "the last line is not the cache check summary:\n" + stdout)
        self.assertEqual(int(final.group(1)), steps)
        self.assertLessEqual(float(final.group(2)), max(float(m.group(3)) for m in step_lines))


class Decoder(GenerateBase):
    extra = {}  # the default task: recall, on a decoder

    def test_greedy_with_cache_check(self):
        r = self.generate("--prompt", "3 7 5 1", "--check-cache")
        prompt, generated = tokens_line(r.stdout)
        self.assertEqual(prompt, [3, 7, 5, 1])
        self.assertEqual(len(generated), 16)  # --max-new default
        self.assertTrue(all(0 <= t < VOCAB for t in generated), generated)
        self.check_cache_output(r.stdout, 16)
        self.assertEqual(r.stderr, "")
        # without the check: the same tokens, one line
        plain = self.generate("--prompt", "3 7 5 1")
        self.assertEqual(plain.stdout.strip().splitlines(), [f"3 7 5 1 | {' '.join(map(str, generated))}"])

    def test_sampling_seeded_and_top_k_1_is_greedy(self):
        greedy = tokens_line(self.generate("--prompt", "3 4", "--max-new", "8").stdout)[1]
        args = ["--prompt", "3 4", "--max-new", "8", "--temperature", "3", "--top-k", "5"]
        a = self.generate(*args, "--seed", "11").stdout
        self.assertEqual(a, self.generate(*args, "--seed", "11").stdout)
        outputs = {a} | {self.generate(*args, "--seed", str(s)).stdout for s in range(5)}
        self.assertGreater(len(outputs), 1, "five seeds sampled the same tokens")
        for seed in ("0", "7"):
            top1 = self.generate("--prompt", "3 4", "--max-new", "8", "--temperature", "2", "--top-k", "1", "--seed", seed)
            self.assertEqual(tokens_line(top1.stdout)[1], greedy)
        checked = self.generate(*args, "--seed", "11", "--check-cache").stdout
        self.assertEqual(tokens_line(checked), tokens_line(a))
        self.check_cache_output(checked, 8)

    def test_positional_table_caps_decoding(self):
        # recall, task.max_len 6, queries 4: inputs of at most 2*6+1+2*4-1 = 20 tokens
        r = self.generate("--prompt", "3 4", "--max-new", "100", "--check-cache")
        _, generated = tokens_line(r.stdout)
        self.assertEqual(len(generated), 19)  # 2 + 19 = max_len + 1 tokens; the last is never fed
        self.check_cache_output(r.stdout, 19)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn("max_len = 20", r.stderr)
        too_long = self.generate("--prompt", " ".join(["3"] * 21), rc=2)
        self.assertEqual(too_long.stderr.count("\n"), 1, too_long.stderr)
        self.assertIn("max_len", too_long.stderr)

    def test_bad_input_exits_2_with_one_line(self):
        cases = [
            (["--prompt", "3 x 5"], '"x" at position 1'),
            (["--prompt", "3 7 32"], "token id 32 at position 2"),
            (["--prompt", "-1 3"], "token id -1 at position 0"),
            (["--prompt", "3 2.5"], '"2.5" at position 1'),
            (["--prompt", "3 99999999999999999999"], "at position 1"),
            (["--prompt", ""], "--prompt: empty value"),
            (["--prompt", "   "], "no token ids"),
            ([], "--prompt is required"),
            (["--prompt", "3", "--temperature", "-1"], "--temperature"),
            (["--prompt", "3", "--temperature", "nan"], "--temperature"),
            (["--prompt", "3", "--top-k", "-2"], "--top-k"),
            (["--prompt", "3", "--max-new", "-1"], "--max-new"),
            (["--prompt", "3", "--max-new", "many"], "max-new"),
            (["--prompt", "3", "--bogus"], "bogus"),
        ]
        for args, expected in cases:
            with self.subTest(args=args):
                r = self.generate(*args, rc=2)
                self.assertEqual(r.stdout, "")
                self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
                self.assertTrue(r.stderr.startswith("attnlab generate: "), r.stderr)
                self.assertIn(expected, r.stderr)
        missing = self.generate("--prompt", "3", rc=2, checkpoint=os.path.join(self.tmp, "nope.h5"))
        self.assertEqual(missing.stderr.count("\n"), 1, missing.stderr)
        self.assertIn("nope.h5", missing.stderr)

    def test_nan_checkpoint_is_refused_on_load(self):
        # A checkpoint holds finite weights only (issue 13): a NaN is refused
        # before any decoding, with or without --check-cache.
        broken = os.path.join(self.tmp, "broken.h5")
        shutil.copy(self.checkpoint, broken)
        with h5py.File(broken, "r+") as f:
            w = f["params/head.weight"]
            w[...] = np.full(w.shape, np.nan, dtype=w.dtype)
        for args in (["--prompt", "3 4", "--check-cache"], ["--prompt", "3 4"]):
            r = self.generate(*args, rc=2, checkpoint=broken)
            self.assertEqual(r.stdout, "")
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
            self.assertIn(f"{broken}: /params/head.weight: element [0, 0] is NaN", r.stderr)


class DecoderRotary(GenerateBase):
    extra = {"model.positional": "rotary"}  # the KV cache's keys are rotated at their own positions

    def test_greedy_with_cache_check(self):
        r = self.generate("--prompt", "3 7 5 1", "--check-cache")
        self.assertEqual(tokens_line(r.stdout)[0], [3, 7, 5, 1])
        self.check_cache_output(r.stdout, len(tokens_line(r.stdout)[1]))


class DecoderAlibi(DecoderRotary):
    extra = {"model.positional": "alibi"}  # the bias of the new queries over every cached key, bottom-right aligned


class EncoderDecoder(GenerateBase):
    extra = {"task.name": "translate", "model.kind": "encoder-decoder"}

    def test_greedy_with_cache_check_and_stop_at_sep(self):
        r = self.generate("--prompt", "5 9 4 12", "--check-cache", "--max-new", "5")
        source, generated = tokens_line(r.stdout)
        self.assertEqual(source, [5, 9, 4, 12])  # the prompt is the source; decoding starts from <BOS>
        # a target ends with <SEP>: an encoder-decoder stops there without --stop-at-sep
        self.assertTrue(len(generated) == 5 or generated[-1] == 1, generated)
        self.assertNotIn(1, generated[:-1])
        self.check_cache_output(r.stdout, len(generated))
        sep = self.generate("--prompt", "5 9 4 12", "--stop-at-sep", "--max-new", "7", "--check-cache")
        _, until_sep = tokens_line(sep.stdout)
        if 1 in until_sep:
            self.assertEqual(until_sep[-1], 1)
            self.assertEqual(until_sep.count(1), 1)
        self.check_cache_output(sep.stdout, len(until_sep))
        # translate, task.max_len 6: the decoder input holds 7 positions, so 7 tokens at most
        capped = self.generate("--prompt", "5 9", "--max-new", "50", "--check-cache")
        until = tokens_line(capped.stdout)[1]
        self.assertTrue(len(until) == 7 or until[-1] == 1, until)
        self.check_cache_output(capped.stdout, len(until))
        if len(until) == 7 and until[-1] != 1:
            self.assertIn("max_len = 7", capped.stderr)

    def test_sampling_seeded(self):
        args = ["--prompt", "5 9 4", "--temperature", "2", "--top-k", "4", "--seed", "3", "--check-cache"]
        a = self.generate(*args).stdout
        self.assertEqual(a, self.generate(*args).stdout)
        generated = tokens_line(a)[1]
        self.assertTrue(len(generated) == 7 or generated[-1] == 1, generated)  # --max-new 16 capped at 7, or <SEP>
        self.check_cache_output(a, len(generated))

    def test_max_new_is_bounded(self):
        r = self.generate("--prompt", "5 9 4", "--max-new", str(2 ** 40), rc=2)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn("--max-new", r.stderr)
        self.assertIn("65536", r.stderr)

    def test_bad_prompt_exits_2(self):
        for prompt, expected in (("5 x", '"x" at position 1'), ("5 9 40", "token id 40 at position 2")):
            r = self.generate("--prompt", prompt, rc=2)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
            self.assertIn(expected, r.stderr)


if __name__ == "__main__":
    cc.main()
