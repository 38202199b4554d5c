"""Sweeps beyond one process: `mpirun -np N attnlab sweep` (rank 0 hands the cells
out to the ranks), `--cell K` (one cell alone, as a Slurm array task runs it),
`--summarize` (the table of whatever has finished) and `--slurm` (the sbatch
array script, run here task by task with SLURM_ARRAY_TASK_ID set, two at once),
with `--seeds-together` too (a seed group on each rank, or in each array task:
`--group K`).
A real Slurm runs the script in scripts/slurm_check.sh (not in CI).

    /usr/bin/python3 tests/sweep/test_sweep_ranks.py ATTNLAB_BINARY
"""
import os
import shutil
import subprocess
import unittest

import sweep_common as sc

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "--mca", "btl", "self,vader", "--mca", "btl_vader_single_copy_mechanism", "none"]
GRID = [("model.heads", "[1, 2]"), ("run.seed", "[0, 1, 2]")]
NUMBERS = ["eval_loss", "eval_token_acc", "eval_seq_acc"]


def have_mpirun():
    return shutil.which("mpirun") is not None


class SweepRanks(sc.SweepTest):
    def run_cmd(self, cmd, env_extra=None):
        env = dict(sc.cli.env(), **(env_extra or {}))
        return subprocess.run(cmd, cwd=self.tmp, env=env, capture_output=True, text=True, timeout=300)

    def cells_numbers(self):
        return self.cells_numbers_of("tiny")

    def cells_numbers_of(self, name):
        _, cells, _ = sc.read_summary_csv(os.path.join(self.sweep_dir(name), "summary.csv"))
        return {c["name"]: ({k: c[k] for k in NUMBERS}, c["status"]) for c in cells}

    def one_line(self, r, wants):
        self.assertEqual(r.returncode, 2, r.stderr)
        ours = [line for line in r.stderr.splitlines() if line.startswith("attnlab")]
        self.assertEqual(len(ours), 1, r.stderr)
        self.assertIn(wants, ours[0])

    @unittest.skipUnless(have_mpirun(), "no mpirun (Debian: openmpi-bin)")
    def test_cells_across_ranks_give_the_single_process_table(self):
        config = self.write_config(sc.config_text(sweep=GRID))
        alone = self.sweep(config, "--jobs", "2")
        self.assertIn("6 of 6 cells ok", alone.stdout)
        expected = self.cells_numbers()
        shutil.rmtree(self.sweep_dir())
        r = self.run_cmd(MPIRUN + ["-np", "3", sc.ATTNLAB, "sweep", config])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.count("6 of 6 cells ok"), 1, r.stdout)  # rank 0 alone reports
        self.assertEqual(self.cells_numbers(), expected)
        for name in expected:
            self.assertTrue(os.path.exists(os.path.join(self.sweep_dir(), "logs", name + ".log")))
        # a rerun under mpirun skips every finished cell
        r = self.run_cmd(MPIRUN + ["-np", "2", sc.ATTNLAB, "sweep", config])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.count("finished earlier, skipped"), 6, r.stderr)

    @unittest.skipUnless(have_mpirun(), "no mpirun (Debian: openmpi-bin)")
    def test_seed_groups_across_ranks_give_the_single_process_table(self):
        config = self.write_config(sc.config_text(sweep=GRID))
        self.sweep(config, "--jobs", "2")
        expected = self.cells_numbers()
        shutil.rmtree(self.sweep_dir())
        r = self.run_cmd(MPIRUN + ["-np", "2", sc.ATTNLAB, "sweep", config, "--seeds-together"])  # a group on each rank
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stderr.count("3 cells side by side in one process"), 2, r.stderr)
        self.assertEqual(self.cells_numbers(), expected)
        for first in (0, 3):
            with open(os.path.join(self.sweep_dir(), "logs", f"together_{first}.log")) as f:
                self.assertIn("3 runs side by side (threads)", f.read())

    @unittest.skipUnless(have_mpirun(), "no mpirun (Debian: openmpi-bin)")
    def test_bad_sweep_under_mpirun_is_one_line(self):
        config = self.write_config(sc.config_text(sweep=[("train.threads", "[1, 2]")]))
        r = self.run_cmd(MPIRUN + ["-np", "2", sc.ATTNLAB, "sweep", config])
        self.one_line(r, "sweep key train.threads")
        self.assertFalse(os.path.exists(self.path("out")))
        config = self.write_config(sc.config_text(sweep=GRID))
        self.one_line(self.run_cmd(MPIRUN + ["-np", "2", sc.ATTNLAB, "sweep", config, "--cell", "0"]),
                      "not under mpirun")

    def test_cell_and_summarize(self):
        config = self.write_config(sc.config_text(sweep=GRID))
        self.sweep(config, "--cell", "4")
        self.sweep(config, "--cell", "0")
        r = self.sweep(config, "--summarize", expect=1)  # four cells have not run
        self.assertIn("2 of 6 cells ok", r.stdout)
        numbers = self.cells_numbers()
        statuses = sorted(status for _, status in numbers.values())
        self.assertEqual(statuses, ["not run"] * 4 + ["ok"] * 2, numbers)
        self.assertEqual(os.listdir(self.sweep_dir()).count("4_model.heads=2,run.seed=1"), 1)
        r = self.sweep(config, "--cell", "4")  # finished: skipped, ok
        self.assertIn("finished earlier, skipped", r.stderr)
        r = self.sweep(config, "--cell", "6", expect=2)
        self.assertIn("the grid has cells 0 to 5", r.stderr)
        r = self.sweep(config, "--cell", "0", "--summarize", expect=2)
        self.assertIn("give one of them", r.stderr)
        r = self.sweep(config, "--cells-per-task", "2", expect=2)
        self.assertIn("goes with --slurm", r.stderr)

    def test_cells_started_at_once_share_the_new_folder(self):
        # as the array tasks of one Slurm job do: each writes sweep.toml, none refuses the other's
        config = self.write_config(sc.config_text(sweep=GRID))
        cells = [subprocess.Popen([sc.ATTNLAB, "sweep", config, "--cell", str(k)], cwd=self.tmp, env=sc.cli.env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k in range(6)]
        outputs = [c.communicate(timeout=300)[0] for c in cells]
        self.assertEqual([c.returncode for c in cells], [0] * 6, outputs)
        r = self.sweep(config, "--summarize")
        self.assertIn("6 of 6 cells ok", r.stdout)

    def test_summarize_needs_a_sweep(self):
        config = self.write_config(sc.config_text(sweep=GRID))
        r = self.sweep(config, "--summarize", expect=2)
        self.assertIn("holds no sweep", r.stderr)
        self.assertFalse(os.path.exists(self.path("out")))

    def test_slurm_script_runs_every_cell_and_tabulates(self):
        config = self.write_config(sc.config_text(sweep=GRID))
        r = self.sweep(config, "--slurm", "--cells-per-task", "4")
        script = self.path("job.sh")
        with open(script, "w") as f:
            f.write(r.stdout)
        self.assertIn("#SBATCH --array=0-1", r.stdout)
        tasks = [subprocess.Popen(["bash", script], cwd=self.tmp, env=dict(sc.cli.env(), SLURM_ARRAY_TASK_ID=str(t)),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for t in (0, 1)]
        outputs = [t.communicate(timeout=300)[0] for t in tasks]
        # the task that ended last tabulated every cell (the first may have seen the other's unfinished)
        self.assertIn("6 of 6 cells ok", "".join(outputs))
        self.assertEqual(sorted(status for _, status in self.cells_numbers().values()), ["ok"] * 6, outputs)
        self.assertFalse([n for n in os.listdir(self.sweep_dir()) if n.endswith(".tmp")])
        r = self.sweep(config, "--slurm", "--cells-per-task", "0", expect=2)
        self.assertIn("--cells-per-task: must be in [1, ", r.stderr)

    def test_slurm_script_of_seed_groups_runs_each_group_side_by_side(self):
        config = self.write_config(sc.config_text(sweep=GRID))
        plain = self.write_config(sc.config_text(sweep=GRID, run__name='"plain"'), "plain.toml")
        self.sweep(plain, "--jobs", "2")
        expected = {name: numbers for name, (numbers, _) in self.cells_numbers_of("plain").items()}
        r = self.sweep(config, "--slurm", "--seeds-together")
        script = self.path("job.sh")
        with open(script, "w") as f:
            f.write(r.stdout)
        self.assertIn("#SBATCH --array=0-1", r.stdout)  # two groups of three
        self.assertIn("--seeds-together=threads --group \"$group\"", r.stdout)
        tasks = [subprocess.Popen(["bash", script], cwd=self.tmp, env=dict(sc.cli.env(), SLURM_ARRAY_TASK_ID=str(t)),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for t in (0, 1)]
        outputs = [t.communicate(timeout=300)[0] for t in tasks]
        self.assertIn("6 of 6 cells ok", "".join(outputs))
        self.assertEqual({name: numbers for name, (numbers, _) in self.cells_numbers().items()}, expected, outputs)
        for first in (0, 3):
            with open(os.path.join(self.sweep_dir(), "logs", f"together_{first}.log")) as f:
                self.assertIn("3 runs side by side (threads)", f.read())
        r = self.sweep(config, "--seeds-together", "--group", "1")  # finished: its cells skipped
        self.assertEqual(r.stderr.count("finished earlier, skipped"), 3, r.stderr)
        r = self.sweep(config, "--seeds-together", "--group", "2", expect=2)
        self.assertIn("--group 2: the grid has seed groups 0 to 1", r.stderr)
        r = self.sweep(config, "--group", "0", expect=2)
        self.assertIn("give --seeds-together", r.stderr)
        r = self.sweep(config, "--seeds-together", "--cell", "0", expect=2)
        self.assertIn("not with --cell", r.stderr)


if __name__ == "__main__":
    sc.main()
