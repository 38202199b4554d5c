"""What tools/doc_figures.py's figures share: the folder they run in, the models
they train once and reuse, and the way a figure's text is written.

A figure function takes a Work and returns its block's text. It asks Work for
what it needs (a checkpoint, a file some command wrote); Work makes each thing
once per run of doc_figures.py, so figures that read the same model share it.
"""
import json
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import h5py

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
PARALLEL = 2  # processes at a time where a figure runs many small commands (the CI machine has 2 cores)

# docs/induction_heads.md's model (its command 1), also docs/circuits.md's.
INDUCTION = ["task.name=induction", "task.vocab=64", "task.min_len=4", "task.max_len=10", "model.layers=2", "model.ffn=0",
             "model.width=32", "model.heads=2", "optim.lr=3e-3", "train.steps=3000", "train.threads=1"]


class Work:
    """A temporary folder, the attnlab binary, and what earlier figures made there."""

    def __init__(self, attnlab, folder, reuse=False):
        """REUSE (doc_figures.py --keep): a finished run already in FOLDER's runs/ is read, not trained again."""
        self.attnlab, self.folder, self.reuse, self.made = attnlab, folder, reuse, {}
        self.lock, self.making = threading.Lock(), {}  # one lock per key: figures may be prepared on two threads

    def run(self, args):
        done = subprocess.run(args, cwd=self.folder, capture_output=True, text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        if done.returncode != 0:
            sys.exit(f"doc_figures: {' '.join(args)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        return done.stdout

    def attnlab_run(self, *args):
        return self.run([self.attnlab, *args])

    def attnlab_many(self, commands):
        """Each argument list run by attnlab, PARALLEL at a time: their outputs, in order."""
        with ThreadPoolExecutor(PARALLEL) as pool:
            return list(pool.map(lambda args: self.attnlab_run(*args), commands))

    def tool(self, name, *args):
        return self.run([PYTHON, os.path.join(REPO, "tools", name), *args])

    def once(self, key, make):
        """make() the first time key is asked for; its result every time."""
        with self.lock:
            making = self.making.setdefault(key, threading.Lock())
        with making:
            if key not in self.made:
                self.made[key] = make()
        return self.made[key]

    def prepare(self, makers):
        """Each of MAKERS (functions of this Work) run PARALLEL at a time: the long runs figures will ask for."""
        with ThreadPoolExecutor(PARALLEL) as pool:
            for done in [pool.submit(make, self) for make in makers]:
                done.result()

    def path(self, name):
        return os.path.join(self.folder, name)

    def h5(self, name):
        return h5py.File(self.path(name), "r")

    def summary(self, path):
        """The summary.json of a run folder, or of the run a checkpoint in it belongs to."""
        run = path.split("/checkpoints/")[0]
        with open(self.path(os.path.join(run, "summary.json"))) as f:
            return json.load(f)

    def train(self, name, *overrides):
        """`attnlab train OVERRIDES run.name=NAME` into runs/: the run folder's path, relative to the work folder."""
        def make():
            if self.reuse and os.path.exists(self.path(f"runs/{name}/summary.json")):
                return f"runs/{name}"
            printed = self.attnlab_run("train", *overrides, f"run.name={name}", "run.out_dir=runs")
            return re.match(r"run (\S+): ", printed.splitlines()[-1]).group(1)
        return self.once(("train", name, overrides), make)

    def induction_model(self, *overrides, name="induction_heads"):
        """docs/induction_heads.md's model (and docs/circuits.md's), with OVERRIDES: its final checkpoint."""
        run = self.train(name, *INDUCTION, *overrides)
        return f"{run}/checkpoints/step_0003000.h5"

    def induction_bump(self, *overrides):
        """configs/induction_bump.toml with OVERRIDES (docs/induction_bump.md's run): the run folder."""
        name = "induction_bump" + "".join("_" + re.sub(r"\W", "", o.split(".")[-1]) for o in overrides)
        return self.train(name, config("induction_bump.toml"), *overrides)

    def induction_pairs(self, name, *args):
        """tools/induction_pairs.py NAME.h5 ARGS: the file's name."""
        return self.once(("pairs", name), lambda: (self.tool("induction_pairs.py", f"{name}.h5", *args), f"{name}.h5")[1])


def config(name):
    """A shipped config's path: configs/NAME."""
    return os.path.join(REPO, "configs", name)


def ablation(work, checkpoint):
    """`attnlab ablate CHECKPOINT --maps --together 1.0+1.1,0.0+0.1` (docs/induction_heads.md's command 3), read back:
    {"baseline": (loss, token acc, seq acc), "zero"/"mean": {(layer, head): (d loss, d token acc, d seq acc)},
     "together": [(name, zero (loss, token acc, seq acc), mean (...))], "maps": the maps file's name}."""
    def make():
        name = checkpoint.replace("/", "_").replace(".h5", "")
        work.attnlab_run("ablate", checkpoint, "--maps", f"{name}.maps.h5", "--together", "1.0+1.1,0.0+0.1", "--out", f"{name}.ablation.h5")
        with work.h5(f"{name}.ablation.h5") as f:
            base = tuple(float(f.attrs[f"baseline_{x}"]) for x in ("loss", "token_acc", "seq_acc"))
            found = {"baseline": base, "maps": f"{name}.maps.h5"}
            for way in ("zero", "mean"):
                grids = [f[f"self/{way}_{x}"][()] for x in ("loss", "token_acc", "seq_acc")]
                found[way] = {(l, h): tuple(float(g[l, h]) - b for g, b in zip(grids, base))
                              for l in range(grids[0].shape[0]) for h in range(grids[0].shape[1])}
            t = f["together"]
            found["together"] = [(n.decode(), *(tuple(float(t[f"{way}_{x}"][i]) for x in ("loss", "token_acc", "seq_acc"))
                                                  for way in ("zero", "mean")))
                                 for i, n in enumerate(t["name"][()])]
        return found
    return work.once(("ablate", checkpoint), make)


# docs/reproductions.md's tables: one row per published result (its wall time is the VM's, not checked).
REPRODUCTIONS = ["result (source)", "published", "attnlab", "wall time here", "command", "checked"]


def number(x, digits=3):
    """x to DIGITS decimals, with no "-0.000"."""
    text = f"{x:.{digits}f}"
    return text[1:] if re.fullmatch(r"-0\.0*", text) else text


def signed(x, digits=2):
    return f"{x:+.{digits}f}"


def wrap(text, width=80, indent=""):
    """TEXT as lines of at most WIDTH characters. A line never starts with a word
    that would end a Markdown paragraph there (a list marker "-", "+", "*" or
    "1.", a quote ">" or a heading "#"): such a word stays on the line before."""
    lines, line = [], ""
    for word in text.split():
        starts_block = re.fullmatch(r"[-+*>]|1[.)]|#{1,6}", word)
        if line and (len(line) + 1 + len(word) <= width or starts_block):
            line += " " + word
        else:
            if line:
                lines.append(line)
            line = (indent if lines else "") + word
    lines.append(line)
    return "\n".join(lines) + "\n"


def paragraph(*sentences):
    """Sentences joined and wrapped as one Markdown paragraph."""
    return wrap(" ".join(sentences))


def bullets(items):
    """A Markdown list, each item wrapped under its "- "."""
    return "".join("- " + wrap(item, width=78, indent="  ") for item in items)


def table(header, rows, align=None):
    """A Markdown table: HEADER and ROWS are lists of cells; ALIGN one of "l", "r", "c" per column (default: left, then right)."""
    align = align or ["l"] + ["r"] * (len(header) - 1)
    rule = {"l": "---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule[a] for a in align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
