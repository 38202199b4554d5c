"""train.seeds: several runs of one config in one process, each equal to its solo run.

A group of seeds trains side by side (on threads, or stacked on the steps that do
not log: train.seeds_mode); every member's folder must hold what `attnlab train run.seed=S` writes alone: the same
metrics.h5 series bit for bit (wall time and throughput aside) and the same final
parameters. A signal checkpoints every member, and a member resumed alone ends
where its uninterrupted solo run ends. Bad train.seeds values are refused in one
line with exit status 2, before anything is written.
"""
import os
import shutil
import signal
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_common as cc  # noqa: E402

# log every 7 steps: most steps run stacked, the logged ones alone
BASE = dict(cc.TINY, **{"train.steps": "30", "train.log_every": "7", "train.eval_every": "15",
                        "train.checkpoint_every": "15", "train.threads": "1"})
# mqar's sequences are of one length: every step that does not log can stack
MQAR = {"task.name": "mqar", "task.vocab": "32", "task.seq_len": "16", "task.max_len": "3", "model.layers": "2"}
VARYING = ("wall", "tokens_per_s")  # columns that measure time


def datasets(path):
    with h5py.File(path, "r") as f:
        out = {}
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def member_dir(group, index, seed, count):
    digits = len(str(count - 1))
    return os.path.join(group, f"{index:0{digits}d}_run.seed={seed}")


class Seeds(cc.TempDirTest):
    def train(self, out, config, timeout=180):
        r = self.run_ok(["train"] + [f"{k}={v}" for k, v in dict(config, **{"run.out_dir": out}).items()], timeout=timeout)
        return r.stderr + r.stdout

    def assert_same_run(self, member, solo, steps):
        ours, theirs = datasets(os.path.join(member, "metrics.h5")), datasets(os.path.join(solo, "metrics.h5"))
        self.assertEqual(sorted(ours), sorted(theirs))
        for name, value in theirs.items():
            if any(v in name for v in VARYING):
                continue
            np.testing.assert_array_equal(ours[name], value, err_msg=f"{member}: metrics.h5 {name}")
        ours = datasets(cc.checkpoint_path(member, steps))
        theirs = datasets(cc.checkpoint_path(solo, steps))
        for name, value in theirs.items():
            if name.startswith("params/") or name.startswith("optimizer/"):
                np.testing.assert_array_equal(ours[name], value, err_msg=f"{member}: checkpoint {name}")

    def check_group(self, config, seeds, mode, threads="1"):
        """The group in `mode` on `threads` threads against each seed's solo run (one thread)."""
        group_out = self.path("group")
        group_config = dict(config, **{"train.seeds": "[" + ", ".join(map(str, seeds)) + "]", "train.seeds_mode": mode,
                                       "train.threads": threads})
        out = self.train(group_out, group_config)
        group = os.path.join(group_out, "default")
        self.assertEqual(len(os.listdir(group)), len(seeds))
        for i, seed in enumerate(seeds):
            solo_out = self.path(f"solo{seed}")
            self.train(solo_out, dict(config, **{"run.seed": str(seed), "train.threads": "1"}))
            member = member_dir(group, i, seed, len(seeds))
            self.assertTrue(os.path.exists(os.path.join(member, "summary.json")), member)
            self.assert_same_run(member, os.path.join(solo_out, "default"), int(config["train.steps"]))
        return out

    def test_stacked_members_equal_their_solo_runs(self):
        out = self.check_group(dict(BASE, **MQAR), [0, 3, 7], "stacked")
        self.assertRegex(out, r"train\.seeds: 2[0-9] of 30 steps stacked")

    def test_members_on_two_threads_equal_their_solo_runs(self):
        self.check_group(dict(BASE, **MQAR), [0, 3, 7], "threads", threads="2")

    def test_stacked_members_of_varying_lengths_equal_their_solo_runs(self):
        # recall (the default task): a step stacks only when the members' batches have one padded width
        self.check_group(BASE, [1, 2], "stacked", threads="2")

    def test_dropout_has_no_stacked_form_and_runs_on_threads(self):
        out = self.check_group(dict(BASE, **{"model.dropout": "0.1"}), [0, 5], "stacked", threads="2")
        self.assertIn("has no stacked form yet", out)

    def test_signal_checkpoints_every_member_and_each_resumes_alone(self):
        config = dict(BASE, **MQAR, **{"train.steps": "4000", "train.checkpoint_every": "20", "train.log_every": "50",
                                       "train.eval_every": "4000", "train.seeds": "[4, 9]", "train.threads": "2"})
        out = self.path("group")
        proc = cc.start(["train"] + [f"{k}={v}" for k, v in dict(config, **{"run.out_dir": out}).items()], self.tmp)
        group = os.path.join(out, "default")
        members = [member_dir(group, 0, 4, 2), member_dir(group, 1, 9, 2)]
        self.assertTrue(cc.wait_for(lambda: all(cc.checkpoint_steps(m) for m in members), proc, timeout=120))
        proc.send_signal(signal.SIGINT)
        rc, log = cc.finish(proc, timeout=120)
        self.assertEqual(rc, 130, log)
        self.assertEqual(log.count("interrupted at step"), 2, log)
        # each member stops where its thread had it (the members do not step in lockstep),
        # at the step its message names, with a checkpoint there
        stopped = [cc.checkpoint_steps(m)[-1] for m in members]
        for seed, step in zip([4, 9], stopped):
            self.assertIn(f"seed {seed}: interrupted at step {step};", log)
        # member 1 alone to step stopped + 40, against its solo run of that length
        steps = stopped[1] + 40
        with open(os.path.join(members[1], "config.toml")) as f:
            text = f.read()
        with open(os.path.join(members[1], "config.toml"), "w") as f:
            f.write(text.replace("steps = 4000", f"steps = {steps}"))
        proc = cc.attnlab(["train", "--resume", group], self.tmp)  # the group's folder: each member resumes alone
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("resume each", proc.stderr)
        self.run_ok(["train", "--resume", members[1]], timeout=120)
        solo_out = self.path("solo")
        solo = dict(config, **{"train.steps": str(steps), "run.seed": "9", "train.threads": "1"})
        del solo["train.seeds"]
        self.train(solo_out, solo)
        theirs = datasets(cc.checkpoint_path(os.path.join(solo_out, "default"), steps))
        ours = datasets(cc.checkpoint_path(members[1], steps))
        for name, value in theirs.items():
            if name.startswith("params/"):
                np.testing.assert_array_equal(ours[name], value, err_msg=name)

    def test_bad_seeds_are_refused_before_anything_is_written(self):
        for value, wants in [("[1, 1]", "given twice"), ("[-1]", "train.seeds"), ("3", "array"),
                             ('["a"]', "integer")]:
            with self.subTest(value=value):
                out = self.path("bad" + str(abs(hash(value))))
                proc = cc.attnlab(["train"] + cc.overrides(**{"train__seeds": value, "run__out_dir": out}), self.tmp)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                lines = proc.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, proc.stderr)
                self.assertIn("train.seeds", lines[0])
                self.assertIn(wants, lines[0])
                self.assertFalse(os.path.exists(out) and os.listdir(out), out)

    def test_run_dir_places_the_group_exactly_and_is_never_reused(self):
        group = self.path("exactly", "here")
        args = ["train", "--run-dir", group] + [f"{k}={v}" for k, v in dict(BASE, **{"train.steps": "5",
                                                                                      "train.seeds": "[2, 6]"}).items()]
        self.run_ok(args)
        self.assertEqual(sorted(os.listdir(group)), ["0_run.seed=2", "1_run.seed=6"])
        before = cc.tree_hashes(group)
        proc = cc.attnlab(args, self.tmp)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("already exists", proc.stderr)
        self.assertEqual(cc.tree_hashes(group), before)

    def test_seeds_mode_without_seeds_is_refused(self):
        proc = cc.attnlab(["train"] + cc.overrides(**{"train__seeds_mode": "stacked", "run__out_dir": self.path("x")}), self.tmp)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("train.seeds_mode: only used when train.seeds names the seeds", proc.stderr)

    def test_a_sweep_refuses_train_seeds(self):
        sweep = os.path.join(self.tmp, "sweep.toml")
        with open(sweep, "w") as f:
            f.write('[train]\nseeds = [0, 1]\nsteps = 5\n\n[sweep]\n"model.heads" = [1, 2]\n')
        proc = cc.attnlab(["sweep", sweep, "run.out_dir=" + self.path("sweeps")], self.tmp)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("train.seeds", proc.stderr)
        self.assertIn("run.seed", proc.stderr)


def config_file(path, values):
    """A config file of dotted key -> TOML value text (strings quoted by the caller)."""
    sections = {}
    for key, value in values.items():
        section, name = key.split(".", 1)
        sections.setdefault(section, []).append(f"{name} = {value}")
    with open(path, "w") as f:
        f.write("".join(f"[{s}]\n" + "\n".join(lines) + "\n" for s, lines in sections.items()))
    return path


class RunsFile(cc.TempDirTest):
    """`attnlab train --runs FILE`: new and resumed runs side by side, each as alone;
    a bad runs file refused in one line, exit 2, nothing written."""

    CONFIG = {k: (v if v.replace(".", "").isdigit() else f'"{v}"') for k, v in dict(BASE, **MQAR).items()}

    def runs_file(self, text, name="runs.toml"):
        with open(self.path(name), "w") as f:
            f.write(text)
        return name

    def test_new_and_resumed_runs_train_as_alone(self):
        steps = int(BASE["train.steps"])
        config_file(self.path("c3.toml"), dict(self.CONFIG, **{"run.seed": "3"}))
        config_file(self.path("c5.toml"), dict(self.CONFIG, **{"run.seed": "5"}))
        for seed in (3, 5):  # the uninterrupted solo runs
            self.run_ok(["train", f"c{seed}.toml", "--run-dir", f"solo{seed}"])
        shutil.copytree(self.path("solo3"), self.path("group", "a"))  # cut back to its first checkpoint, to resume
        os.remove(os.path.join(self.path("group", "a"), "summary.json"))
        os.remove(cc.checkpoint_path(self.path("group", "a"), steps))
        for mode in ("threads", "stacked"):
            with self.subTest(mode=mode):
                group = self.path("group")
                if mode == "stacked":  # again from the same start
                    shutil.rmtree(group)
                    shutil.copytree(self.path("first"), group)
                else:
                    shutil.copytree(group, self.path("first"))
                self.runs_file(f'mode = "{mode}"\n[[run]]\nresume = "group/a"\n[[run]]\nconfig = "c5.toml"\ndir = "group/b/"\n')
                r = self.run_ok(["train", "--runs", "runs.toml"])
                self.assertIn(f"2 runs side by side ({mode})", r.stderr)
                if mode == "stacked":
                    self.assertRegex(r.stderr, r"train --runs: [0-9]+ of [0-9]+ steps stacked")
                self.assertIn("resuming group/a from step 15", r.stderr)
                Seeds.assert_same_run(self, self.path("group", "a"), self.path("solo3"), steps)
                Seeds.assert_same_run(self, self.path("group", "b"), self.path("solo5"), steps)

    def test_bad_runs_files_are_refused_before_anything_is_written(self):
        config_file(self.path("c.toml"), self.CONFIG)
        config_file(self.path("wide.toml"), dict(self.CONFIG, **{"model.width": "32"}))
        with open(self.path("swept.toml"), "w") as f:
            f.write('[sweep]\n"run.seed" = [0, 1]\n')
        os.mkdir(self.path("taken"))
        run = '[[run]]\nconfig = "c.toml"\ndir = "out/a"\n'
        cases = [
            ("mode = \n", "runs.toml:1: TOML syntax error"),
            ('bogus = 1\n' + run, "runs.toml:1: unknown key 'bogus'"),
            ('mode = "threads"\n', "no [[run]]"),
            ('mode = "sideways"\n' + run, 'runs.toml:1: mode: expected "threads" or "stacked"'),
            (run + 'resume = "out/b"\n', "run 1: give config and dir (a new run) or resume"),
            ('[[run]]\ndir = "out/a"\n', "run 1: give config and dir"),
            ('[[run]]\nconf = "c.toml"\n', "runs.toml:2: run 1: unknown key 'conf'"),
            ('[[run]]\nconfig = "c.toml"\ndir = 3\n', "runs.toml:3: dir: expected a path"),
            (run + run, "runs.toml:4: run 2: out/a is listed twice"),
            ('[[run]]\nconfig = "missing.toml"\ndir = "out/a"\n', "missing.toml"),
            ('[[run]]\nconfig = "swept.toml"\ndir = "out/a"\n', "swept.toml has a [sweep] table"),
            (run + '[[run]]\nconfig = "wide.toml"\ndir = "out/b"\n', "the runs out/a and out/b differ in model.width"),
            (run + '[[run]]\nconfig = "c.toml"\ndir = "taken"\n', "taken already exists"),
            (run + '[[run]]\nresume = "taken"\n', "--resume taken: not a run directory"),
        ]
        for text, says in cases:
            with self.subTest(text=text):
                self.runs_file(text)
                proc = cc.attnlab(["train", "--runs", "runs.toml"], self.tmp)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                lines = proc.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, proc.stderr)
                self.assertIn(says, lines[0])
                self.assertFalse(os.path.exists(self.path("out")), proc.stderr)
        for args, says in ((["--runs", "absent.toml"], "--runs absent.toml: no such file"),
                           (["c.toml", "--runs", "runs.toml"], "--runs lists the runs")):
            proc = cc.attnlab(["train"] + args, self.tmp)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
            self.assertIn(says, proc.stderr)


if __name__ == "__main__":
    cc.main()
