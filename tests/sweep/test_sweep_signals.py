"""A sweep and its processes: SIGTERM or SIGINT to `attnlab sweep` reaches the
running cells (each checkpoints and exits 130), the sweep waits for all of them,
says in one line what it stopped and how to resume, and exits 130; rerunning it
finishes the cells. A SIGKILLed sweep takes its cells down too (they get
SIGTERM, so they checkpoint). A second sweep of the same folder while the first
runs is refused with the first one's pid, and so is a second process for a
running cell (`--cell K`, or a whole sweep while `--cell K` or a trainer started
by hand runs it), before it writes anything.

    /usr/bin/python3 tests/sweep/test_sweep_signals.py ATTNLAB_BINARY
"""
import contextlib
import os
import re
import signal
import subprocess
import time

import sweep_common as sc

STEPS = 5000  # a cell trains for a few seconds: long enough to interrupt, short enough to finish on the rerun
SWEEP = [("model.heads", "[1, 2]")]
NAMES = ["0_model.heads=1", "1_model.heads=2"]
LONG = dict(train__steps=str(STEPS), train__eval_every="1000", train__checkpoint_every="1000")


def children(pid):
    """The pids whose parent is pid."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(entry))
    return out


def alive(pid):
    """Running (neither gone nor a zombie waiting for a parent that never reaps)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def processes_in(folder):
    """Live processes whose working directory is `folder` (what a sweep and its cells use)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if os.readlink(f"/proc/{entry}/cwd") == folder and alive(int(entry)):
                    out.append(int(entry))
            except OSError:
                pass
    return out


@contextlib.contextmanager
def frozen(pids):
    """The trainers stopped (SIGSTOP) while the body runs, continued after: a check
    made meanwhile (a refused second process) never races a cell that would
    otherwise finish its steps on a loaded machine (CI runs two tests at a time)."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def trains(printed):
    """Whether a trainer's output has a progress line ("step 1030/5000  loss ..."):
    its loop runs, with its signal handlers in place. "resuming ... from step N"
    comes earlier, during the setup."""
    return re.search(r"^step \d+/\d+ ", printed, re.MULTILINE) is not None


def checkpoint_steps(cell):
    folder = os.path.join(cell, "checkpoints")
    return sorted(int(n[5:-3]) for n in os.listdir(folder) if n.startswith("step_") and n.endswith(".h5"))


class SweepProcesses(sc.SweepTest):
    """Starting a sweep of long cells, and watching it and them."""

    def start(self, *extra, **changes):
        self.config = self.write_config(sc.config_text(sweep=SWEEP, **dict(LONG, **changes)))
        args = [sc.ATTNLAB, "sweep", self.config] + list(extra)
        proc = subprocess.Popen(args, cwd=self.tmp, env=sc.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        return proc

    def log(self, name):
        try:
            with open(os.path.join(self.sweep_dir(), "logs", name + ".log")) as f:
                return f.read()
        except OSError:
            return ""

    def wait_training(self, proc, names):
        """Until each named cell has logged a training step; returns the sweep's child pids."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if all(trains(self.log(n)) for n in names):
                return children(proc.pid)
            time.sleep(0.01)
        out, err = proc.communicate(timeout=60) if proc.poll() is not None else ("", "")
        self.fail(f"the cells never trained (exit {proc.poll()})\n{out}\n{err}")

    def wait_gone(self, pids, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.02)
        self.assertFalse([p for p in pids if alive(p)], "cell processes still run")

    def check_interrupted(self, proc, signame, stopped, not_started=0):
        out, err = proc.communicate(timeout=120)
        shown = f"exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"
        self.assertEqual(proc.returncode, 130, shown)
        self.assertEqual(out, "", shown)
        last = err.splitlines()[-1]
        self.assertEqual(sum(line.startswith("attnlab sweep: ") for line in err.splitlines()), 1, shown)
        self.assertTrue(last.startswith(f"attnlab sweep: interrupted by {signame}: "), shown)
        for name in stopped:
            self.assertIn(name, last, shown)
            self.assertIn(f"sweep: {name}: interrupted", err.splitlines(), shown)
        self.assertIn(f"rerun `attnlab sweep {self.config}", last, shown)
        if not_started:
            self.assertIn(f"{not_started} not started", last, shown)
        return shown

    def check_stopped_cell(self, name, shown):
        cell = os.path.join(self.sweep_dir(), name)
        steps = checkpoint_steps(cell)
        self.assertTrue(steps, f"{name}: no checkpoint\n{shown}")
        self.assertLess(steps[-1], STEPS, f"{name}: trained to the end before the signal\n{shown}")
        self.assertFalse(os.path.exists(os.path.join(cell, "summary.json")), shown)
        self.assertIn("interrupted at step", self.log(name), shown)

    def check_rerun_finishes(self, expect_lines):
        r = self.sweep(self.config, "--jobs", "2", expect=0)
        for line in expect_lines:
            self.assertIn(line, r.stderr.splitlines(), r.shown)
        for name in NAMES:
            self.assertEqual(sc.read_json(os.path.join(self.sweep_dir(), name, "summary.json"))["steps"], STEPS, r.shown)
        self.assertIn("2 of 2 cells ok", r.stdout, r.shown)


class Signals(SweepProcesses):
    def test_sigterm_reaches_the_cells(self):
        proc = self.start("--jobs", "2")
        cells = self.wait_training(proc, NAMES)
        self.assertEqual(len(cells), 2, cells)
        proc.send_signal(signal.SIGTERM)
        shown = self.check_interrupted(proc, "SIGTERM", NAMES)
        self.wait_gone(cells, timeout=1)  # the sweep waited for them
        self.assertEqual(processes_in(self.tmp), [], shown)
        for name in NAMES:
            self.check_stopped_cell(name, shown)
        _, rows, _ = sc.read_summary_csv(os.path.join(self.sweep_dir(), "summary.csv"))
        self.assertEqual([row["status"] for row in rows], ["interrupted", "interrupted"], shown)
        self.check_rerun_finishes([f"sweep: {n}: resuming" for n in NAMES])

    def test_sigint_with_a_cell_not_started(self):
        proc = self.start("--jobs", "1")
        cells = self.wait_training(proc, NAMES[:1])
        proc.send_signal(signal.SIGINT)
        shown = self.check_interrupted(proc, "SIGINT", NAMES[:1], not_started=1)
        self.wait_gone(cells, timeout=1)
        self.assertEqual(processes_in(self.tmp), [], shown)
        self.check_stopped_cell(NAMES[0], shown)
        self.assertFalse(os.path.exists(os.path.join(self.sweep_dir(), NAMES[1])), shown)
        self.check_rerun_finishes([f"sweep: {NAMES[0]}: resuming", f"sweep: {NAMES[1]}: starting"])

    def test_sigkill_of_the_sweep_stops_its_cells(self):
        proc = self.start("--jobs", "2")
        cells = self.wait_training(proc, NAMES)
        self.assertEqual(len(cells), 2, cells)
        proc.kill()
        proc.communicate(timeout=10)
        self.wait_gone(cells)  # PR_SET_PDEATHSIG: each got SIGTERM
        for name in NAMES:
            self.check_stopped_cell(name, self.log(name))
        self.check_rerun_finishes([f"sweep: {n}: resuming" for n in NAMES])

    def test_second_sweep_of_the_same_folder_is_refused(self):
        proc = self.start("--jobs", "2")
        cells = self.wait_training(proc, NAMES)
        args = ["sweep", self.config, "--jobs", "2"]
        with frozen(cells):
            r = sc.attnlab(args, self.tmp)
        shown = sc.shown(args, r)
        self.assertEqual(r.returncode, 2, shown)
        self.assertEqual(r.stdout, "", shown)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, shown)
        self.assertTrue(lines[0].startswith("attnlab sweep: "), shown)
        self.assertIn("out/tiny", lines[0], shown)
        self.assertIn(f"pid {proc.pid}", lines[0], shown)
        self.assertEqual(proc.poll(), None, "the first sweep stopped\n" + shown)
        proc.send_signal(signal.SIGTERM)
        self.check_interrupted(proc, "SIGTERM", NAMES)
        self.wait_gone(cells, timeout=1)


class OneWriterPerCell(SweepProcesses):
    """One writer per cell folder: while `sweep --cell 0` (or a trainer started by
    hand) runs cell 0, a second `sweep --cell 0` or a whole sweep is refused in
    one line naming the cell's folder and the holder's pid, exit 2, before it
    looks into the folder or opens the cell's log; the running cell goes on."""

    def refused(self, args, holder):
        cell = os.path.join("out", "tiny", NAMES[0])
        r = sc.attnlab(["sweep", self.config] + args, self.tmp)
        shown = sc.shown(["sweep", self.config] + args, r)
        self.assertEqual(r.returncode, 2, shown)
        self.assertEqual(r.stdout, "", shown)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, shown)
        self.assertTrue(lines[0].startswith(f"attnlab sweep: [sweep] {cell} is in use by another attnlab process "
                                            f"(pid {holder})"), shown)
        return shown

    def check_refusals(self, holder, running, trainers):
        """`trainers` (the processes that train, a subset of `running`) are held
        stopped while the refused processes run."""
        cell = os.path.join(self.sweep_dir(), NAMES[0])
        inode = os.stat(cell).st_ino
        for args in (["--cell", "0"], ["--jobs", "2"]):
            with frozen(trainers):
                shown = self.refused(args, holder)
            self.assertEqual(os.stat(cell).st_ino, inode, "the cell's folder was made anew\n" + shown)
            self.assertTrue(all(alive(p) for p in running), "the running cell stopped\n" + shown)
            self.assertNotIn("in use", self.log(NAMES[0]), "the refusal went into the running cell's log\n" + shown)
        self.assertEqual(sorted(os.listdir(os.path.join(self.sweep_dir(), "logs"))), [NAMES[0] + ".log"])

    def test_second_cell_process_before_the_first_checkpoint(self):
        proc = self.start("--cell", "0", train__checkpoint_every=str(STEPS))
        trainers = self.wait_training(proc, NAMES[:1])
        self.assertEqual(checkpoint_steps(os.path.join(self.sweep_dir(), NAMES[0])), [])
        self.check_refusals(proc.pid, [proc.pid] + trainers, trainers)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 130, err)
        log = self.log(NAMES[0])
        self.assertEqual(log.count("interrupted at step"), 1, log)  # one trainer wrote the cell
        self.check_rerun_finishes([f"sweep: {NAMES[0]}: resuming", f"sweep: {NAMES[1]}: starting"])

    def test_second_cell_process_after_a_checkpoint(self):
        proc = self.start("--cell", "0")
        trainers = self.wait_training(proc, NAMES[:1])
        cell = os.path.join(self.sweep_dir(), NAMES[0])
        deadline = time.monotonic() + 60
        while not checkpoint_steps(cell) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        self.assertTrue(checkpoint_steps(cell), "no checkpoint")
        self.check_refusals(proc.pid, [proc.pid] + trainers, trainers)
        self.assertNotIn("resuming", self.log(NAMES[0]))
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 130)

    def test_whole_sweep_meets_a_cell_taken_meanwhile(self):
        # The sweep checks every cell before it starts; a trainer started by hand
        # in cell 1's folder after that (held here, stopped, while it runs) is met
        # when the sweep reaches the cell: refused, the other cells go on.
        proc = self.start("--jobs", "1")
        self.wait_training(proc, NAMES[:1])
        single = self.write_config(sc.config_text(model__heads="2", **LONG), "single.toml")
        cell = os.path.join(self.sweep_dir(), NAMES[1])
        other = subprocess.Popen([sc.ATTNLAB, "train", single, "--run-dir", cell], cwd=self.tmp, env=sc.env(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: other.poll() is None and (other.kill(), other.wait()))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and other.poll() is None and not os.path.exists(os.path.join(cell, "metrics.h5")):
            time.sleep(0.01)
        self.assertIsNone(other.poll(), "the trainer started by hand ended early")
        os.kill(other.pid, signal.SIGSTOP)
        try:
            out, err = proc.communicate(timeout=120)
        finally:
            os.kill(other.pid, signal.SIGCONT)
        shown = f"exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"
        self.assertEqual(proc.returncode, 1, shown)
        self.assertIn(f"sweep: {NAMES[1]}: refused: [sweep] out/tiny/{NAMES[1]} is in use by another attnlab process "
                      f"(pid {other.pid}); wait for it to finish or stop it first", err.splitlines(), shown)
        self.assertEqual(err.count(f"sweep: {NAMES[1]}: "), 1, shown)
        self.assertFalse(os.path.exists(os.path.join(self.sweep_dir(), "logs", NAMES[1] + ".log")), shown)
        _, rows, _ = sc.read_summary_csv(os.path.join(self.sweep_dir(), "summary.csv"))
        self.assertEqual([row["status"] for row in rows], ["ok", "refused"], shown)

    def test_trainer_started_by_hand_in_a_cell(self):
        proc = self.start("--cell", "0")
        self.wait_training(proc, NAMES[:1])
        cell = os.path.join(self.sweep_dir(), NAMES[0])
        deadline = time.monotonic() + 60
        while not checkpoint_steps(cell) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 130)
        # Its output goes to a file: the signal below is sent once it trains (a
        # signal during its setup ends it as SIGTERM's default would, having
        # written nothing, not with 130).
        output = os.path.join(self.tmp, "trainer.out")
        with open(output, "w") as out:
            trainer = subprocess.Popen([sc.ATTNLAB, "train", "--resume", cell], cwd=self.tmp, env=sc.env(),
                                       stdout=out, stderr=subprocess.STDOUT)
        self.addCleanup(lambda: trainer.poll() is None and (trainer.kill(), trainer.wait()))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and trainer.poll() is None:
            with open(os.path.join(cell, ".lock")) as f, open(output) as printed:
                if f.read() == str(trainer.pid) and trains(printed.read()):
                    break
            time.sleep(0.01)
        self.assertIsNone(trainer.poll(), "the trainer ended before it could be seen running")
        self.check_refusals(trainer.pid, [trainer.pid], [trainer.pid])
        trainer.send_signal(signal.SIGTERM)
        self.assertEqual(trainer.wait(timeout=120), 130)


if __name__ == "__main__":
    sc.main()
