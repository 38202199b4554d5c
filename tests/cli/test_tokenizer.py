"""task.tokenizer, a model's BPE tokenizer (an imported model's, or one a file
task trains with), checked once (BpeTokenizer::for_model) wherever it is used:

- train checks it as import does: a missing folder, a file, a folder without a
  tokenizer, a bad tokenizer file or one with more tokens than task.vocab is one
  line naming task.tokenizer, exit 2, no run folder (those cases are rows of
  test_bad_inputs.py's table); one within task.vocab trains and is recorded;
- a model with more embedding rows than its tokenizer has tokens (every Pythia
  model: 50304 rows for 50277 tokens; here 32 rows for 20 tokens) shows each
  row the tokenizer lacks as "<id>" in inspect, generate and lens (inspect used
  to write its file and then exit 2 decoding such an id);
- a checkpoint whose tokenizer is gone, is a file, or has more tokens than the
  model has rows is refused, naming the checkpoint and task.tokenizer, by every
  command that reads or shows its tokens as text, before it writes anything;
  a command that does neither (eval --data) still runs.

The tokenizer is GPT-2's vocab.json + merges.txt with the letters a..t as its
20 symbols (printable bytes are their own symbols) and no merges, so the text
"abc" is the ids 0 1 2. The model is trained on rows of token 30 alone, so its
predictions are rows the tokenizer lacks.

    /usr/bin/python3 tests/cli/test_tokenizer.py ATTNLAB_BINARY REPO_ROOT
"""
import json
import os
import shutil
import tempfile
import tomllib
import unittest

import h5py
import numpy as np

import cli_common as cc

LETTERS = "abcdefghijklmnopqrst"  # ids 0..19
ROWS = 32                         # task.vocab: the model's embedding rows


def write_tokenizer(folder, symbols):
    """GPT-2's two files: each symbol its index, no merges."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.json"), "w") as f:
        json.dump({s: i for i, s in enumerate(symbols)}, f)
    with open(os.path.join(folder, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")


def shown(ids):
    """The text of ids as attnlab shows it: a letter, or "<id>" for a row the tokenizer lacks."""
    return "".join(LETTERS[i] if i < len(LETTERS) else f"<{i}>" for i in ids)


def label(i):
    """One token as lens and decompose label it."""
    return f"'{LETTERS[i]}'" if i < len(LETTERS) else f"<{i}>"


def with_tokenizer(checkpoint, copy, folder):
    """A copy of `checkpoint` whose config attribute names `folder` as task.tokenizer."""
    shutil.copy(checkpoint, copy)
    with h5py.File(copy, "r+") as f:
        config = f.attrs["config"]
        config = config.decode() if isinstance(config, bytes) else config
        task = tomllib.loads(config)["task"]
        old = f'tokenizer = "{task["tokenizer"]}"'
        assert old in config, config
        f.attrs["config"] = config.replace(old, f'tokenizer = "{folder}"')
    return copy


class Tokenizer(cc.TempDirTest):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="attnlab_cli_tokenizer_")
        cls.addClassCleanup(shutil.rmtree, cls.root, ignore_errors=True)
        cls.tokenizer = os.path.join(cls.root, "tok20")
        write_tokenizer(cls.tokenizer, LETTERS)
        cls.data = os.path.join(cls.root, "tokens.h5")
        with h5py.File(cls.data, "w") as f:
            f["tokens"] = np.full((64, 12), 30, np.int32)
            f["lengths"] = np.full(64, 12, np.int64)
        cls.runs = os.path.join(cls.root, "runs")
        config = dict(cc.TINY, **{"task.name": "file", "task.path": cls.data, "task.vocab": str(ROWS),
                                  "task.tokenizer": cls.tokenizer, "optim.lr": "0.01", "run.out_dir": cls.runs})
        r = cc.attnlab(["train"] + cc.overrides(config), cls.root, timeout=120)
        assert r.returncode == 0, r.stderr
        cls.run_dir = os.path.join(cls.runs, "default")
        cls.checkpoint = cc.checkpoint_path(cls.run_dir, 40)

    def argmax(self, text):
        """The model's prediction at each position of `text` (inspect's logits)."""
        out = self.path("argmax.h5")
        self.run_ok(["inspect", self.checkpoint, "--tokens", text, "--out", out])
        with h5py.File(out, "r") as f:
            ids = f["logits"][0].argmax(axis=-1).tolist()
        os.remove(out)
        return ids

    def test_a_tokenizer_within_the_vocabulary_trains_and_is_recorded(self):
        with open(os.path.join(self.run_dir, "config.toml"), "rb") as f:
            task = tomllib.load(f)["task"]
        self.assertEqual((task["tokenizer"], task["vocab"]), (self.tokenizer, ROWS))

    def test_rows_the_tokenizer_lacks_show_as_ids(self):
        best = self.argmax("abc")
        self.assertTrue(any(i >= len(LETTERS) for i in best), f"the model predicts only letters {best}: the test shows nothing")
        out = self.path("i.h5")
        r = cc.attnlab(["inspect", self.checkpoint, "--tokens", "abc", "--out", out], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f'input "abc" -> argmax "{shown(best)}"', r.stdout)
        # an input row holding a row the tokenizer lacks (25)
        rows = self.path("rows.h5")
        with h5py.File(rows, "w") as f:
            f["tokens"] = np.array([[3, 25, 4]], np.int32)
        r = cc.attnlab(["inspect", self.checkpoint, "--input", rows, "--out", self.path("rows_out.h5")], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('input "d<25>e" -> argmax "', r.stdout)
        # generate (greedy): the prompt, then the text of the next prediction
        r = cc.attnlab(["generate", self.checkpoint, "--prompt", "ab", "--max-new", "1"], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines()[-1], "ab" + shown(self.argmax("ab")[-1:]))
        # lens: the last stream's top token is the model's own prediction
        r = cc.attnlab(["lens", self.checkpoint, "--tokens", "abc", "--out", self.path("lens.h5")], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"blocks.0.resid_post    top token {label(best[-1]):>4}", r.stdout)

    def test_a_checkpoint_with_a_bad_tokenizer_is_refused_before_anything_is_written(self):
        inputs = self.path("inputs")  # what the commands read: unchanged by a refusal
        gone = os.path.join(inputs, "gone")  # a tokenizer folder that was there, then removed
        write_tokenizer(gone, LETTERS)
        shutil.rmtree(gone)
        plain = os.path.join(inputs, "plain.txt")
        with open(plain, "w") as f:
            f.write("not a folder\n")
        larger = os.path.join(inputs, "tok40")  # 40 tokens for the model's 32 rows
        write_tokenizer(larger, LETTERS + "uvwxyzABCDEFGHIJKLMN")
        variants = [
            ("gone", gone, "no such folder"),
            ("plain", plain, "not a folder"),
            ("larger", larger, f"the tokenizer has 40 tokens, more than the model's vocabulary of {ROWS}"),
        ]
        rows = os.path.join(inputs, "rows.h5")
        with h5py.File(rows, "w") as f:
            f["tokens"] = np.array([[3, 4, 5]], np.int32)
        checkpoints = {name: with_tokenizer(self.checkpoint, os.path.join(inputs, f"{name}.h5"), folder)
                       for name, folder, _ in variants}
        before = {inputs: cc.tree_hashes(inputs), self.run_dir: cc.tree_hashes(self.run_dir)}
        for name, folder, problem in variants:
            ckpt = checkpoints[name]
            commands = [
                ["inspect", ckpt, "--tokens", "abc", "--out", "i.h5"],
                ["inspect", ckpt, "--input", rows, "--out", "i.h5"],
                ["generate", ckpt, "--prompt", "ab", "--max-new", "2"],
                ["lens", ckpt, "--tokens", "abc", "--out", "lens.h5"],
                ["decompose", ckpt, "--tokens", "abcd", "--head", "0.0", "--query", "2", "--key", "1", "--out", "parts.h5"],
                ["patch", ckpt, "--clean", "abc", "--corrupt", "abd", "--out", "patch.h5"],
                ["path-patch", ckpt, "--clean", "abc", "--corrupt", "abd", "--sender", "embed", "--receiver", "0.0:q"],
                ["circuit", ckpt, "--clean", "abc", "--corrupt", "abd", "--out", "circuit.h5"],
            ]
            for args in commands:
                with self.subTest(variant=name, command=" ".join(args[:1] + args[2:])):
                    cwd = tempfile.mkdtemp(dir=self.tmp)  # the outputs would land here
                    cc.run_refused(self, args, cwd, self.tmp, [f"{ckpt} (config attribute): task.tokenizer {folder}: {problem}"],
                                   before)
                    os.rmdir(cwd)
            # what neither reads nor shows text does not need the tokenizer
            r = cc.attnlab(["eval", ckpt, "--data", self.data, "--batches", "1"], self.tmp)
            self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    cc.main()
