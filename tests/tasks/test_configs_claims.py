#!/usr/bin/python3
"""Configs keep their word: every shipped config in configs/ trains (seed 0,
train.threads = 1) to the figures its header claims, and its header quotes no
other figure.

    /usr/bin/python3 tests/tasks/test_configs_claims.py ATTNLAB_BINARY REPO_ROOT [Claims.test_copy]
    /usr/bin/python3 tests/tasks/test_configs_claims.py ATTNLAB_BINARY REPO_ROOT Headers   # no training, 1 s

Each configs/*.toml carries one machine-read line in its header,

    # Claim: eval_token_acc 0.992 +- 0.005; eval_seq_acc 0.961 +- 0.03; first_step_at_target 2600 +- 300

(summary.json's final held-out token accuracy, optionally its sequence
accuracy, and the step of the first evaluation at train.target_accuracy, each
with its slack; a task that never reaches its target, as text, claims its
final eval loss instead: "; eval_loss 0.234 +- 0.02"; a config with
train.head_scores may add Olsson et al.'s phase change, read from metrics.h5:
"; induction_step 310 +- 150; loss_drop_step 300 +- 150", the first
/head_scores step at which some head's induction score is >= 0.5 and the first
evaluation whose loss is at most half the first evaluation's). The "Measured"
lines above it (from "# Measured (seed S, train.threads = 1, MACHINE, DATE):"
to the Claim line) may quote only figures the test checks, each in one of
these phrases:

    eval token accuracy A     (sequence S)     eval loss L     first eval at >= P% at step T
    induction score first >= 0.5 at step I
    eval loss first at or below half its first value at step D
    after N steps     evals every E steps     N held-out batches of B

A, S, L, T, I and D must be the Claim's own text; N, E, P (train.target_accuracy in
percent), the held-out batches and B must be the config's train.steps,
train.eval_every, train.eval_batches and train.batch, and the seed its
run.seed. Any other figure in those lines fails the test (a wall time goes on
a line of its own, outside them, as it depends on the machine), so the text a
user reads cannot drift from what is checked. The config's values are its
file's over the defaults `attnlab train --keys` lists.

The test then trains the config in a temporary directory and asserts every
claimed figure within its slack, in both directions: a config that now does
much better than it says is mis-documented too. The runs are deterministic for
a given build at one thread; the slack covers another machine's BLAS kernels.

configs/file.toml reads the repository's runs/tokens/add.h5 (its task.path is
relative to the config's folder): the test makes one with
tools/make_token_file.py, as the header says, in its temporary directory and
names it with an override. configs/text.toml reads the shipped
configs/text/stories.txt from any working directory (here the temporary one).
CTest runs one config per test (label `configs`); about 2 minutes of CPU in all.
A config of configs/published/ with a Claim line is checked the same way by
name, outside CI (docs/reproductions.md gives each one's time):

    /usr/bin/python3 tests/tasks/test_configs_claims.py build/attnlab . Claims.test_published_mqar_zoology
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import unittest

ATTNLAB = None
REPO_ROOT = None

NUMBER = r"[0-9]+(?:\.[0-9]+)?"
CLAIM = re.compile(rf"^# Claim: eval_token_acc (?P<acc>{NUMBER}) \+- (?P<acc_slack>{NUMBER})"
                   rf"(?:; eval_seq_acc (?P<seq>{NUMBER}) \+- (?P<seq_slack>{NUMBER}))?; "
                   rf"(?:first_step_at_target (?P<step>\d+) \+- (?P<step_slack>\d+)"
                   rf"|eval_loss (?P<loss>{NUMBER}) \+- (?P<loss_slack>{NUMBER}))"
                   rf"(?:; induction_step (?P<ind>\d+) \+- (?P<ind_slack>\d+); loss_drop_step (?P<drop>\d+) \+- (?P<drop_slack>\d+))?$", re.M)
MEASURED = re.compile(r"^# Measured \(seed (?P<seed>\d+), train\.threads = 1, [^()]+, \d{4}-\d\d-\d\d\):$")

# The phrases of the Measured lines that may hold a figure: (pattern, what each
# group must equal). "claim:X" is the Claim's text for X; "config:K" the
# config's key K; "percent:K" the config's K in percent.
PHRASES = [
    (r"eval token accuracy (?P<a>{n})", {"a": "claim:acc"}),
    (r"\(sequence (?P<a>{n})\)", {"a": "claim:seq"}),
    (r"eval loss (?P<a>{n})", {"a": "claim:loss"}),
    (r"first eval at >= (?P<a>{n})% at step (?P<b>\d+)", {"a": "percent:train.target_accuracy", "b": "claim:step"}),
    (r"induction score first >= 0\.5 at step (?P<a>\d+)", {"a": "claim:ind"}),
    (r"eval loss first at or below half its first value at step (?P<a>\d+)", {"a": "claim:drop"}),
    (r"after (?P<a>\d+) steps", {"a": "config:train.steps"}),
    (r"evals every (?P<a>\d+) steps", {"a": "config:train.eval_every"}),
    (r"(?P<a>\d+) held-out batches of (?P<b>\d+)", {"a": "config:train.eval_batches", "b": "config:train.batch"}),
]


def header(path):
    with open(path) as f:
        lines = []
        for line in f:
            if not line.startswith("#"):
                break
            lines.append(line.rstrip("\n"))
    return lines


def defaults():
    """Every key's default, from `attnlab train --keys` (key, default as TOML text, doc)."""
    listed = subprocess.run([ATTNLAB, "train", "--keys"], capture_output=True, text=True, check=True).stdout
    values = {}
    for line in listed.splitlines()[1:]:
        parts = re.split(r"\s{2,}", line.strip())
        if len(parts) >= 3 and "." in parts[0]:
            values[parts[0]] = tomllib.loads(f"v = {parts[1]}")["v"]
    return values


def config_values(path, default_values):
    """The config's dotted keys: its file's values over the defaults."""
    with open(path, "rb") as f:
        document = tomllib.load(f)
    values = dict(default_values)
    for section, table in document.items():
        if section != "sweep":
            for key, value in table.items():
                values[f"{section}.{key}"] = value
    return values


def claims(path):
    m = CLAIM.search("\n".join(header(path)))
    if m is None:
        raise AssertionError(f"{path}: no '# Claim: eval_token_acc A +- a[; eval_seq_acc S +- s]; first_step_at_target T +- t' "
                             "(or '; eval_loss L +- l', for a task that never reaches its target) line in its header")
    return m


def measured_lines(path):
    """The "# Measured (...):" line and the lines after it, up to the Claim line."""
    lines = header(path)
    starts = [i for i, line in enumerate(lines) if line.startswith("# Measured")]
    ends = [i for i, line in enumerate(lines) if line.startswith("# Claim:")]
    if len(starts) != 1 or len(ends) != 1 or not starts[0] < ends[0]:
        raise AssertionError(f"{path}: its header needs one '# Measured (seed S, train.threads = 1, MACHINE, DATE):' "
                             "paragraph followed by one '# Claim:' line")
    return lines[starts[0]], lines[starts[0] + 1:ends[0]]


def same_number(text, value):
    return abs(float(text) - float(value)) <= 1e-9 * max(1.0, abs(float(value)))  # 0.57 * 100 is 56.99999999999999


def check_header(path, default_values):
    """Every figure of the Measured lines is one the test checks (see the module's doc)."""
    claim = claims(path)
    config = config_values(path, default_values)
    first, body = measured_lines(path)
    m = MEASURED.match(first)
    if m is None:
        raise AssertionError(f"{path}: '{first}' is not '# Measured (seed S, train.threads = 1, MACHINE, YYYY-MM-DD):' "
                             "(the test trains at one thread)")
    if int(m["seed"]) != config["run.seed"]:
        raise AssertionError(f"{path}: the Measured line says seed {m['seed']}, the config has run.seed = {config['run.seed']}")
    text = " ".join(line.lstrip("#").strip() for line in body)  # a phrase may run over a line break
    for pattern, wanted in PHRASES:
        for found in list(re.finditer(pattern.format(n=NUMBER), text)):
            for group, source in wanted.items():
                quoted = found[group]
                kind, name = source.split(":")
                if kind == "claim":
                    expected = claim[name]
                    if expected is None:
                        raise AssertionError(f"{path}: the Measured lines quote '{found[0]}', but the Claim line has no {name} figure")
                    if quoted != expected:
                        raise AssertionError(f"{path}: the Measured lines say '{found[0]}', the Claim line {expected}")
                else:
                    value = config[name] * 100 if kind == "percent" else config[name]
                    if not same_number(quoted, value):
                        raise AssertionError(f"{path}: the Measured lines say '{found[0]}', the config has {name} = {config[name]}")
            text = text.replace(found[0], " ", 1)
    leftover = re.search(r"[^ ]*\d[^ ]*", text)
    if leftover:
        raise AssertionError(f"{path}: the Measured lines quote '{leftover[0]}', a figure the claims test does not check: "
                             "remove it, or claim it on the Claim line (see tests/tasks/test_configs_claims.py)")
    return claim


def config_paths():
    """Test name -> config: every configs/*.toml, and each configs/published/*.toml
    whose header has a Claim line (as "published_NAME": too slow for CI, run by
    its documented command; the headers test checks its header in CI all the same)."""
    paths = {os.path.splitext(os.path.basename(p))[0]: p for p in sorted(glob.glob(os.path.join(REPO_ROOT, "configs", "*.toml")))}
    for p in sorted(glob.glob(os.path.join(REPO_ROOT, "configs", "published", "*.toml"))):
        if any(line.startswith("# Claim:") for line in header(p)):
            paths["published_" + os.path.splitext(os.path.basename(p))[0]] = p
    return paths


class Headers(unittest.TestCase):
    """The headers alone (no training): each quotes only checked figures."""

    @classmethod
    def setUpClass(cls):
        cls.defaults = defaults()

    def test_every_config(self):
        for name, path in config_paths().items():
            with self.subTest(config=name):
                check_header(path, self.defaults)

    def test_the_check_refuses_drift(self):
        # The check itself, on a made-up header: drifted figures, an unchecked
        # figure, a wrong config value and a figure the Claim lacks each fail.
        good = ("# Measured (seed 0, train.threads = 1, 2-core VM, 2026-12-04):\n"
                "#   eval token accuracy 0.992 (sequence 0.961) after 3000 steps; first eval at\n"
                "#   >= 99% at step 2600 (evals every 100 steps).\n"
                "# Claim: eval_token_acc 0.992 +- 0.005; eval_seq_acc 0.961 +- 0.03; first_step_at_target 2600 +- 300\n"
                "[train]\nsteps = 3000\neval_every = 100\n")
        cases = [(("accuracy 0.992", "accuracy 0.994"), "the Claim line 0.992"),
                 (("at step 2600", "at step 2400"), "the Claim line 2600"),
                 (("(evals", ", >= 99.1% from then on (evals"), "'99.1%'"),
                 (("steps).", "steps). Wall 16.8 s."), "'16.8'"),
                 (("after 3000", "after 1500"), "train.steps = 3000"),
                 (("evals every 100", "evals every 250"), "train.eval_every = 100"),
                 (("; eval_seq_acc 0.961 +- 0.03", ""), "has no seq figure"),
                 (("seed 0,", "seed 1,"), "run.seed = 0")]
        with tempfile.TemporaryDirectory(prefix="attnlab_claims_") as folder:
            path = os.path.join(folder, "x.toml")

            def verdict(text):
                with open(path, "w") as f:
                    f.write(text)
                try:
                    check_header(path, self.defaults)
                except AssertionError as e:
                    return str(e)
                return "passed"

            self.assertEqual(verdict(good), "passed")
            for (old, new), message in cases:
                with self.subTest(change=new):
                    self.assertIn(old, good)
                    self.assertIn(message, verdict(good.replace(old, new)))


class Claims(unittest.TestCase):
    def check(self, name):
        path = config_paths()[name]
        claim = check_header(path, defaults())
        acc, acc_slack = float(claim["acc"]), float(claim["acc_slack"])
        with tempfile.TemporaryDirectory(prefix=f"attnlab_config_{name}_") as folder:
            cwd = folder
            args = [ATTNLAB, "train", path, "train.threads=1", f"run.out_dir={os.path.join(folder, 'out')}"]
            if name == "file":
                subprocess.run(["/usr/bin/python3", os.path.join(REPO_ROOT, "tools", "make_token_file.py"),
                                "runs/tokens/add.h5"], cwd=folder, check=True, capture_output=True)
                args.append("task.path=runs/tokens/add.h5")  # an override: relative to the working directory
            published = name.startswith("published_")  # minutes to hours: no limit but the caller's
            done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=None if published else 300)
            self.assertEqual(done.returncode, 0, f"{' '.join(args)}\n{done.stderr[-2000:]}")
            (summary_path,) = glob.glob(os.path.join(folder, "out", "*", "summary.json"))
            with open(summary_path) as f:
                summary = json.load(f)
            if claim["ind"] is not None:
                self.check_phase_change(path, claim, os.path.join(os.path.dirname(summary_path), "metrics.h5"))
        got_acc = summary["eval_token_acc"]
        print(f"\n{name}: eval token accuracy {got_acc:.4f} (claims {acc} +- {acc_slack}), sequence {summary['eval_seq_acc']:.4f}, "
              f"eval loss {summary['eval_loss']:.4f}, first eval at target at step {summary['first_step_at_target']}", file=sys.stderr)
        self.assertLessEqual(abs(got_acc - acc), acc_slack, f"{path}: eval token accuracy {got_acc:.4f}, the header claims {acc} +- {acc_slack}")
        if claim["seq"] is not None:
            seq, seq_slack = float(claim["seq"]), float(claim["seq_slack"])
            self.assertLessEqual(abs(summary["eval_seq_acc"] - seq), seq_slack,
                                 f"{path}: eval sequence accuracy {summary['eval_seq_acc']:.4f}, the header claims {seq} +- {seq_slack}")
        if claim["loss"] is not None:
            loss, loss_slack = float(claim["loss"]), float(claim["loss_slack"])
            self.assertLessEqual(abs(summary["eval_loss"] - loss), loss_slack,
                                 f"{path}: eval loss {summary['eval_loss']:.4f}, the header claims {loss} +- {loss_slack}")
            return
        step, step_slack = int(claim["step"]), int(claim["step_slack"])
        got_step = summary["first_step_at_target"]
        self.assertIsNotNone(got_step, f"{path}: no evaluation reached the target; the header claims step {step}")
        self.assertLessEqual(abs(got_step - step), step_slack,
                             f"{path}: first eval at target at step {got_step}, the header claims {step} +- {step_slack}")


    def check_phase_change(self, path, claim, metrics):
        """induction_step and loss_drop_step (the module's doc) from the run's metrics.h5."""
        import h5py
        import numpy as np
        with h5py.File(metrics, "r") as f:
            steps = f["head_scores/step"][()]
            best = f["head_scores/induction"][()].reshape(len(steps), -1).max(axis=1)
            eval_steps, eval_loss = f["eval/step"][()], f["eval/loss"][()]
        formed = steps[best >= 0.5]
        dropped = eval_steps[eval_loss <= eval_loss[0] / 2]
        self.assertTrue(len(formed) and len(dropped), f"{path}: no head reached induction score 0.5, or the eval loss never halved")
        print(f"{os.path.basename(path)}: induction score first >= 0.5 at step {formed[0]}, eval loss halved at step {dropped[0]}", file=sys.stderr)
        for got, name in ((int(formed[0]), "ind"), (int(dropped[0]), "drop")):
            self.assertLessEqual(abs(got - int(claim[name])), int(claim[name + "_slack"]),
                                 f"{path}: {name} step {got}, the header claims {claim[name]} +- {claim[name + '_slack']}")


def add_tests():
    for name in config_paths():
        setattr(Claims, f"test_{name}", lambda self, name=name: self.check(name))


if __name__ == "__main__":
    ATTNLAB = os.path.abspath(sys.argv.pop(1))
    REPO_ROOT = os.path.abspath(sys.argv.pop(1))
    add_tests()
    unittest.main(verbosity=2)
