"""task.name = "text": a UTF-8 file read as characters. The run's config and
every checkpoint carry the alphabet; generate, inspect, lens and patch take and
show text; bad text files and prompts get one line and exit 2.

    /usr/bin/python3 tests/cli/test_text.py ATTNLAB_BINARY REPO_ROOT
"""
import json
import os
import shutil
import tomllib

import h5py

import cli_common as cc

# A tiny model on the shipped stories (tools/make_text.py), a few seconds.
TEXT = {"task.name": "text", "task.max_len": "24", "model.width": "32", "model.heads": "2", "model.layers": "1",
        "model.ffn": "64", "train.steps": "60", "train.batch": "8", "train.log_every": "20", "train.eval_every": "30",
        "train.checkpoint_every": "30", "train.eval_batches": "1", "optim.lr": "3e-3"}


class Text(cc.TempDirTest):
    def stories(self):
        return os.path.join(cc.REPO_ROOT, "configs", "text", "stories.txt")

    def train(self, path, **changes):
        out = self.path("runs")
        args = ["train"] + cc.overrides(TEXT, **{"task.path": path, "run.out_dir": out}, **changes)
        return cc.attnlab(args, self.tmp), os.path.join(out, "default")

    def test_trains_and_keeps_its_alphabet(self):
        copy = self.path("stories.txt")
        shutil.copyfile(self.stories(), copy)
        r, run = self.train(copy)
        self.assertEqual(r.returncode, 0, r.stderr)
        os.remove(copy)  # what follows reads and writes text from the checkpoint alone
        with open(self.stories(), encoding="utf-8") as f:
            alphabet = "".join(sorted(set(f.read())))
        with open(os.path.join(run, "config.toml"), "rb") as f:
            task = tomllib.load(f)["task"]
        self.assertEqual(task["alphabet"], alphabet)
        self.assertEqual(task["vocab"], len(alphabet))
        checkpoint = cc.checkpoint_path(run, 60)
        with h5py.File(checkpoint, "r") as f:
            saved = tomllib.loads(f.attrs["config"].decode() if isinstance(f.attrs["config"], bytes) else f.attrs["config"])
        self.assertEqual(saved["task"]["alphabet"], alphabet, "the checkpoint does not carry the alphabet")
        # generate takes and prints text: the prompt, then characters of the alphabet
        g = self.run_ok(["generate", run, "--prompt", "Anna had a ", "--max-new", "10"])
        line = g.stdout.rstrip("\n")
        self.assertTrue(line.startswith("Anna had a "), g.stdout)
        self.assertEqual(len(line), len("Anna had a ") + 10, g.stdout)
        self.assertTrue(set(line) <= set(alphabet), g.stdout)
        # inspect shows the characters
        i = self.run_ok(["inspect", run, "--tokens", "Ben had a dog.", "--out", self.path("i.h5")])
        self.assertIn('input "Ben had a dog." -> argmax "', i.stdout)
        # a character the file never had: one line, exit 2
        bad = cc.attnlab(["generate", run, "--prompt", "Zoe"], self.tmp)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertEqual(bad.stderr.count("\n"), 1, bad.stderr)
        self.assertIn("U+005A at character 0 is not in the model's alphabet", bad.stderr)
        # eval: text windows have one length, so --min-len is refused; --max-len evaluates other windows
        bad = cc.attnlab(["eval", run, "--min-len", "4"], self.tmp)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertEqual(bad.stderr.count("\n"), 1, bad.stderr)
        self.assertIn("--min-len: task \"text\" draws windows of exactly task.max_len characters", bad.stderr)
        self.assertEqual(self.run_ok(["lens", run, "--tokens", "Anna", "--out", self.path("l.h5")]).returncode, 0)
        p = self.run_ok(["patch", run, "--clean", "Anna had a dog", "--corrupt", "Anna had a cat", "--metric", "prob",
                         "--out", self.path("p.h5")])
        self.assertIn("wrote", p.stdout)

    def test_bad_text_files(self):
        not_utf8 = self.path("latin1.txt")
        with open(not_utf8, "wb") as f:
            f.write(b"caf\xe9 " * 100)
        short = self.path("short.txt")
        with open(short, "w") as f:
            f.write("too short")
        fifo = self.path("pipe.txt")
        os.mkfifo(fifo)
        sparse = self.path("sparse.txt")  # 2 GiB of nothing on disk
        with open(sparse, "wb") as f:
            f.truncate(2 << 30)
        os.mkdir(self.path("folder"))
        for path, want in ((not_utf8, "not UTF-8 at byte 3"), (short, "9 characters; windows of task.max_len + 1 = 25"),
                           (self.path("missing.txt"), "no such file"),
                           # what is not a regular file is never opened (a FIFO hung, /dev/zero filled the memory)
                           (fifo, "not a regular file (a FIFO)"), ("/dev/zero", "not a regular file (a character device)"),
                           (self.path("folder"), "not a regular file (a directory)"),
                           (sparse, "2147483648 bytes, more than the 268435456 (256 MiB) a text task reads")):
            want = f"task.path {path}: {want}"
            r, _ = self.train(path)
            shown = f"{path}: exit {r.returncode}\nstderr: {r.stderr!r}"
            self.assertEqual(r.returncode, 2, shown)
            self.assertEqual(r.stderr.count("\n"), 1, shown)
            self.assertIn(want, r.stderr, shown)
            self.assertFalse(os.path.exists(self.path("runs")), "a refused run left a folder\n" + shown)
        r = cc.attnlab(["train"] + cc.overrides(TEXT, **{"task.name": "copy", "task.alphabet": "ab", "run.out_dir": self.path("runs")}),
                       self.tmp)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("task.alphabet: only used when task.name = \"text\"", r.stderr)
        # an alphabet given with the config is the model's characters: sorted, each once, task.vocab of them
        for alphabet, vocab, want in (("aab", 3, "U+0061 at character 1 repeats character 0"),
                                      ("ba", 2, "U+0061 at character 1 comes before U+0062 at character 0"),
                                      ("ab\udcff", 3, "not UTF-8 at byte 2"),  # the byte 0xff, as the shell passes it
                                      ("abc", 32, "3 characters, but task.vocab = 32")):
            r, _ = self.train(self.stories(), **{"task.alphabet": alphabet, "task.vocab": str(vocab)})
            shown = f"{alphabet!r}: exit {r.returncode}\nstderr: {r.stderr!r}"
            self.assertEqual(r.returncode, 2, shown)
            self.assertEqual(r.stderr.count("\n"), 1, shown)
            self.assertIn("task.alphabet: " + want, r.stderr, shown)
            self.assertFalse(os.path.exists(self.path("runs")), "a refused run left a folder\n" + shown)

    def test_a_checkpoint_with_a_wrong_alphabet_is_refused(self):
        # A checkpoint whose alphabet is not its model's printed wrong letters or U+FFFD with exit 0.
        r, run = self.train(self.stories(), **{"train.steps": "30", "train.checkpoint_every": "30"})
        self.assertEqual(r.returncode, 0, r.stderr)
        checkpoint = cc.checkpoint_path(run, 30)
        with h5py.File(checkpoint, "r") as f:
            config = f.attrs["config"]
        config = config.decode() if isinstance(config, bytes) else config
        alphabet = tomllib.loads(config)["task"]["alphabet"]
        line = next(l for l in config.splitlines() if l.startswith("alphabet = "))
        first, second = (f"U+{ord(c):04X}" for c in alphabet[:2])
        for name, crafted, want in (("short", alphabet[:-1], f"{len(alphabet) - 1} characters, but task.vocab = {len(alphabet)}"),
                                    ("swapped", alphabet[1] + alphabet[0] + alphabet[2:],
                                     f"{first} at character 1 comes before {second} at character 0"),
                                    ("repeated", alphabet[0] + alphabet[0] + alphabet[2:], f"{first} at character 1 repeats character 0"),
                                    # once reported as a tok_emb.weight shape mismatch
                                    ("empty", "", "empty, but a text model's saved config holds its alphabet")):
            path = self.path(name + ".h5")
            shutil.copyfile(checkpoint, path)
            with h5py.File(path, "r+") as f:
                f.attrs["config"] = config.replace(line, "alphabet = " + json.dumps(crafted))
            for command in (["generate", path, "--prompt", "Anna", "--max-new", "3"], ["eval", path]):
                g = cc.attnlab(command, self.tmp)
                shown = f"{name}: {' '.join(command)}: exit {g.returncode}\nstdout: {g.stdout!r}\nstderr: {g.stderr!r}"
                self.assertEqual(g.returncode, 2, shown)
                self.assertEqual(g.stdout, "", shown)
                self.assertEqual(g.stderr.count("\n"), 1, shown)
                self.assertIn(f"{path} (config attribute)", g.stderr, shown)
                self.assertIn("task.alphabet: " + want, g.stderr, shown)
        # patch --answers: one character a side on a text model
        prompts = ["patch", run, "--clean", "Anna had a dog", "--corrupt", "Anna had a cat", "--out", self.path("p.h5")]
        for answers, want in (("ab:c", "--answers: 'ab:c': the clean answer is 2 characters; an answer is one character"),
                              ("a:cd", "--answers: 'a:cd': the corrupt answer is 2 characters; an answer is one character")):
            p = cc.attnlab(prompts + ["--answers", answers], self.tmp)
            shown = f"{answers}: exit {p.returncode}\nstderr: {p.stderr!r}"
            self.assertEqual(p.returncode, 2, shown)
            self.assertEqual(p.stderr.count("\n"), 1, shown)
            self.assertIn(want, p.stderr, shown)
            self.assertFalse(os.path.exists(self.path("p.h5")), shown)
        self.assertIn("wrote", self.run_ok(prompts + ["--answers", "g:t"]).stdout)


if __name__ == "__main__":
    cc.main()
