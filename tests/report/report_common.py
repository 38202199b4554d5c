"""Shared fixtures of the `attnlab report` tests (tests/report/): tiny runs, a
saved audit and ablation, a tiny sweep, made once per test process in a
temporary folder, and `attnlab report` itself.

    /usr/bin/python3 tests/report/test_X.py ATTNLAB_BINARY REPO_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import cli_common as cc  # noqa: E402

# 2 layers x 2 heads, width 16: 40 steps in well under a second.
DECODER = dict(cc.TINY, **{"model.layers": "2", "train.eval_every": "10"})
ENC_DEC = dict(DECODER, **{"task.name": "translate", "model.kind": "encoder-decoder"})
# The first swept key is a string (model.scale); head widths 4 and 8; 40 steps reach no target.
SWEEP = """[run]
name = "grid"
[model]
width = 16
heads = 2
layers = 1
ffn = 0
[train]
steps = 40
batch = 8
log_every = 10
eval_every = 20
checkpoint_every = 40
eval_batches = 1
[sweep]
"model.scale" = ["sqrt", "none"]
"model.head_width" = [4, 8]
"run.seed" = [0, 1]
"""
PROMPT = "3 7 5 1 4 9"
# An induction model with feed-forwards (mlp nodes in its circuit): 2000 steps, about 3 s;
# `attnlab circuit` of it on key pairs keeps a handful of its 46 edges at --prune 0.01.
INDUCTION = dict(DECODER, **{"task.name": "induction", "task.vocab": "64", "task.min_len": "4", "task.max_len": "10",
                             "model.width": "32", "optim.lr": "3e-3", "train.steps": "2000", "train.batch": "32",
                             "train.eval_every": "500", "train.log_every": "100", "train.checkpoint_every": "2000",
                             "train.threads": "1"})


class Fixtures:
    root = None
    made = {}

    @classmethod
    def folder(cls):
        if cls.root is None:
            cls.root = tempfile.mkdtemp(prefix="attnlab_report_test_")
        return cls.root

    @classmethod
    def train(cls, name, config, steps=None):
        if name not in cls.made:
            out = os.path.join(cls.folder(), "runs")
            changes = {"run.out_dir": out, "run.name": name}
            if steps:
                changes["train.steps"] = str(steps)
            r = cc.attnlab(["train"] + cc.overrides(config, **changes), cls.folder(), timeout=120)
            assert r.returncode == 0, r.stderr
            cls.made[name] = os.path.join(out, name)
        return cls.made[name]

    @classmethod
    def checkpoint(cls, name, config):
        run = cls.train(name, config)
        return cc.checkpoint_path(run, int(config["train.steps"]))

    @classmethod
    def analysed_run(cls):
        """The decoder run with a saved audit (audit.json) and an ablation beside its last checkpoint."""
        if "analysed" not in cls.made:
            run = cls.train("dec", DECODER)
            checkpoint = cls.checkpoint("dec", DECODER)
            r = cc.attnlab(["audit", checkpoint, "--json", "--batches", "1"], cls.folder())
            assert r.returncode == 0, r.stderr
            with open(os.path.join(run, "audit.json"), "w") as f:
                f.write(r.stdout)
            r = cc.attnlab(["ablate", checkpoint, "--batches", "1"], cls.folder())
            assert r.returncode == 0, r.stderr
            cls.made["analysed"] = run
        return cls.made["analysed"]

    @classmethod
    def sweep(cls):
        if "sweep" not in cls.made:
            config = os.path.join(cls.folder(), "grid.toml")
            with open(config, "w") as f:
                f.write(SWEEP)  # into ROOT/runs/grid (run.out_dir defaults to runs, from the working folder)
            r = cc.attnlab(["sweep", config, "--jobs", "2"], cls.folder(), timeout=120)
            assert r.returncode == 0, r.stderr
            cls.made["sweep"] = os.path.join(cls.folder(), "runs", "grid")
        return cls.made["sweep"]

    @classmethod
    def circuit(cls, *options):
        """An `attnlab circuit` file of the induction model on key pairs (tools/induction_pairs.py),
        --metric prob and `options`; one file per set of options."""
        name = "circuit" + "".join(options)
        if name not in cls.made:
            checkpoint = cls.checkpoint("induction", INDUCTION)
            pairs = os.path.join(cls.folder(), "key_pairs.h5")
            if not os.path.exists(pairs):
                r = subprocess.run([sys.executable, os.path.join(cc.REPO_ROOT, "tools", "induction_pairs.py"), pairs,
                                    "--kind", "key"], capture_output=True, text=True, timeout=60)
                assert r.returncode == 0, r.stderr
            out = os.path.join(cls.folder(), f"{name.replace(' ', '_')}.circuit.h5")
            r = cc.attnlab(["circuit", checkpoint, "--pairs", pairs, "--metric", "prob", *options, "--out", out],
                           cls.folder(), timeout=120)
            assert r.returncode == 0, r.stderr
            cls.made[name] = out
        return cls.made[name]

    @classmethod
    def cleanup(cls):
        if cls.root:
            shutil.rmtree(cls.root, ignore_errors=True)
        cls.root, cls.made = None, {}


def report(args, cwd, timeout=120):
    """attnlab report ARGS: CompletedProcess with text output."""
    return cc.attnlab(["report"] + list(args), cwd, timeout)


def inspect_weights(checkpoint, tokens, cwd):
    """{(kind, layer): [H, Tq, Tk] array} of `attnlab inspect` on one prompt."""
    import h5py
    import numpy as np
    out = os.path.join(cwd, "expected_inspect.h5")
    r = cc.attnlab(["inspect", checkpoint, "--tokens", tokens, "--out", out], cwd)
    assert r.returncode == 0, r.stderr
    weights = {}
    with h5py.File(out, "r") as f:
        for kind in f["attention"]:
            for name in f["attention"][kind]:
                if name.startswith("layer_"):
                    weights[(kind, int(name[6:]))] = np.asarray(f["attention"][kind][name][0], dtype=float)
    os.unlink(out)
    return weights


def ls(folder):
    return sorted(os.listdir(folder))


main = cc.main
