"""metrics.h5 as docs/file_formats.md ("metrics.h5") fixes it: readable with h5py
(SWMR) while the run goes on and after it ends; root attributes, dataset names,
shapes and dtypes; masked attention mass exactly 0 and entropy_norm in [0, 1]
for every head at every logged step, for decoder-only and encoder-decoder
models; summary.json and a config.toml that loads back.

    /usr/bin/python3 tests/cli/test_metrics_h5.py ATTNLAB_BINARY REPO_ROOT
"""
import json
import math
import os
import sys
import time
import tomllib
import unittest

import numpy as np

import cli_common as cc

TRAIN = ["step", "loss", "lr", "grad_norm", "tokens_per_s", "wall_s"]
EVAL = ["step", "loss", "token_acc", "seq_acc"]
ATTENTION = ["step", "entropy", "entropy_norm", "masked_mass", "masked_mass_max", "score_std"]

LIVE_STEPS = 1000  # a few seconds: long enough that a reader opens the file while it trains, even on an idle fast machine
LIVE = dict(cc.TINY, **{"model.width": "32", "model.layers": "2", "model.ffn": "64", "train.batch": "16",
                        "train.steps": str(LIVE_STEPS), "train.log_every": "5", "train.eval_every": "250"})
# Decoder, 2 layers x 4 heads, grouped K/V, padding (recall has 3 to 6 pairs).
DECODER = dict(cc.TINY, **{"model.layers": "2", "model.heads": "4", "model.kv_heads": "2", "train.steps": "30"})
# Encoder-decoder on translate: 2 layers x 2 heads per stack.
ENCDEC = dict(cc.TINY, **{"task.name": "translate", "model.kind": "encoder-decoder", "model.layers": "2",
                          "train.steps": "30"})


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


class MetricsH5(cc.TempDirTest):
    def train(self, config, label="runs", **changes):
        out = self.path(label)
        self.run_ok(["train"] + cc.overrides(config, **{"run.out_dir": out}, **changes))
        return os.path.join(out, "default")

    # ---- while the run goes on ----

    def test_readable_while_training(self):
        import h5py
        run_dir = self.path("live", "default")
        metrics = os.path.join(run_dir, "metrics.h5")
        proc = cc.start(["train"] + cc.overrides(LIVE, **{"run.out_dir": self.path("live")}), self.tmp)
        seen_while_running = []  # row counts of /train/step seen while the process ran
        try:
            f = None
            deadline = time.monotonic() + 60
            while f is None and time.monotonic() < deadline and proc.poll() is None:
                try:
                    f = cc.open_metrics(metrics)
                except (OSError, FileNotFoundError):  # not there yet, or not yet in SWMR mode
                    time.sleep(0.005)
            self.assertIsNotNone(f, "metrics.h5 could not be opened while the run went on")
            with f:
                step, loss = f["train/step"], f["train/loss"]
                while proc.poll() is None and time.monotonic() < deadline:
                    step.refresh()
                    loss.refresh()
                    rows = min(step.shape[0], loss.shape[0])  # the datasets of a group may briefly differ
                    if rows and proc.poll() is None:
                        steps, losses = step[:rows], loss[:rows]
                        written = steps >= 0  # a row not yet written reads as step -1, NaN
                        self.assertTrue(np.all(steps[written] % 5 == 0), steps)
                        self.assertTrue(np.all(np.diff(steps[written]) > 0), steps)
                        self.assertTrue(np.all(np.isfinite(losses[written])), losses)
                        if not seen_while_running or rows > seen_while_running[-1]:
                            seen_while_running.append(rows)
                    time.sleep(0.005)
                rc, log = cc.finish(proc)
                self.assertEqual(rc, 0, log)
                # The reader that was open during the run sees the end too.
                step.refresh()
                self.assertEqual(step.shape[0], LIVE_STEPS // 5)
        finally:
            if proc.poll() is None:
                proc.kill()
                cc.finish(proc)
        print(f"\n  rows of /train/step seen while the run went on: {seen_while_running}", file=sys.stderr)
        self.assertGreaterEqual(len(seen_while_running), 2,
                                f"rows seen while the run went on: {seen_while_running} (run too short?)")
        self.assertLess(seen_while_running[0], LIVE_STEPS // 5)
        with cc.open_metrics(metrics) as f:
            np.testing.assert_array_equal(f["train/step"][()], np.arange(5, LIVE_STEPS + 1, 5))
        with h5py.File(metrics, "r") as f:  # a plain (non-SWMR) reader after the end
            self.assertEqual(f["train/step"].shape, (LIVE_STEPS // 5,))

    # ---- after the run ----

    def check_layout(self, run_dir, config, kinds):
        steps = int(config["train.steps"])
        log_every, eval_every = int(config["train.log_every"]), int(config["train.eval_every"])
        layers, heads = int(config["model.layers"]), int(config["model.heads"])
        with cc.open_metrics(os.path.join(run_dir, "metrics.h5")) as f:
            attrs = dict(f.attrs)
            self.assertEqual(text(attrs["format"]), "attnlab-metrics")
            self.assertEqual(int(attrs["format_version"]), 1)
            self.assertEqual(int(attrs["layers"]), layers)
            self.assertEqual(int(attrs["heads"]), heads)
            toml = tomllib.loads(text(attrs["config"]))
            self.assertEqual(toml["model"]["layers"], layers)
            self.assertEqual(toml["model"]["heads"], heads)
            self.assertEqual(toml["model"]["width"], int(config["model.width"]))
            self.assertEqual(sorted(f.keys()), ["attention", "eval", "train"])
            self.assertEqual(sorted(f["train"].keys()), sorted(TRAIN))
            self.assertEqual(sorted(f["eval"].keys()), sorted(EVAL))
            self.assertEqual(sorted(f["attention"].keys()), sorted(kinds))

            logged = list(range(log_every, steps + 1, log_every))
            if logged[-1] != steps:
                logged.append(steps)
            evals = list(range(eval_every, steps + 1, eval_every))
            if not evals or evals[-1] != steps:
                evals.append(steps)
            for group, names, expect in (("train", TRAIN, logged), ("eval", EVAL, evals)):
                for name in names:
                    d = f[group][name]
                    self.assertEqual(d.shape, (len(expect),), f"{group}/{name}")
                    self.assertEqual(d.dtype, np.int64 if name == "step" else np.float64, f"{group}/{name}")
                    self.assertIsNotNone(d.chunks, f"{group}/{name} is not chunked")
                    self.assertIsNone(d.maxshape[0], f"{group}/{name} cannot grow")
                    self.assertTrue(np.all(np.isfinite(d[()])), f"{group}/{name}")
                np.testing.assert_array_equal(f[group]["step"][()], expect)
            lr, grad, wall = f["train/lr"][()], f["train/grad_norm"][()], f["train/wall_s"][()]
            self.assertTrue(np.all(lr >= 0) and np.all(grad >= 0) and np.all(f["train/tokens_per_s"][()] > 0))
            self.assertTrue(np.all(np.diff(wall) >= 0), wall)
            for name in ("token_acc", "seq_acc"):
                acc = f["eval"][name][()]
                self.assertTrue(np.all((acc >= 0) & (acc <= 1)), f"eval/{name} {acc}")

            for kind in kinds:
                g = f["attention"][kind]
                self.assertEqual(sorted(g.keys()), sorted(ATTENTION), kind)
                self.assertEqual(g["step"].dtype, np.int64)
                # row 0: the model at initialisation (the seed chapter's initial score statistic)
                np.testing.assert_array_equal(g["step"][()], [0] + logged, kind)
                for name in ATTENTION[1:]:
                    d = g[name]
                    self.assertEqual(d.shape, (len(logged) + 1, layers, heads), f"{kind}/{name}")
                    self.assertEqual(d.dtype, np.float64, f"{kind}/{name}")
                    self.assertIsNone(d.maxshape[0], f"{kind}/{name} cannot grow")
                    self.assertTrue(np.all(np.isfinite(d[()])), f"{kind}/{name} has NaN/Inf")
                for name in ("masked_mass", "masked_mass_max"):
                    v = g[name][()]
                    self.assertTrue(np.all(v == 0.0), f"{kind}/{name} is not exactly 0 at "
                                                      f"{np.argwhere(v != 0)[:5].tolist()}: {v[v != 0][:5]}")
                self.assertTrue(np.all(g["score_std"][()] > 0), f"{kind}/score_std not positive")
                norm, entropy = g["entropy_norm"][()], g["entropy"][()]
                self.assertTrue(np.all((norm >= 0) & (norm <= 1)), f"{kind}/entropy_norm outside [0, 1]: {norm}")
                self.assertTrue(np.all(entropy >= 0), f"{kind}/entropy negative: {entropy}")
                self.assertTrue(np.any(entropy > 0), f"{kind}/entropy is all 0")

    def test_decoder_layout(self):
        run_dir = self.train(DECODER)
        self.check_layout(run_dir, DECODER, ["self"])

    def test_encoder_decoder_layout(self):
        run_dir = self.train(ENCDEC)
        self.check_layout(run_dir, ENCDEC, ["cross", "dec_self", "enc_self"])

    def test_log_every_not_dividing_steps(self):
        # The last step is always logged and evaluated.
        config = dict(DECODER, **{"train.steps": "23", "train.log_every": "5", "train.eval_every": "10"})
        run_dir = self.train(config)
        self.check_layout(run_dir, config, ["self"])

    # ---- summary.json and config.toml ----

    def test_summary_and_config_round_trip(self):
        run_dir = self.train(DECODER)
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        for key in ("run_dir", "steps", "eval_loss", "eval_token_acc", "eval_seq_acc", "target_accuracy",
                    "first_step_at_target", "wall_s", "tokens_per_s", "peak_rss_mb"):
            self.assertIn(key, summary)
        self.assertEqual(summary["steps"], int(DECODER["train.steps"]))
        self.assertEqual(os.path.realpath(summary["run_dir"]), os.path.realpath(run_dir))
        for key in ("eval_token_acc", "eval_seq_acc"):
            self.assertTrue(0 <= summary[key] <= 1, f"{key} = {summary[key]}")
        self.assertTrue(math.isfinite(summary["eval_loss"]) and summary["eval_loss"] > 0)
        self.assertTrue(summary["wall_s"] > 0 and summary["tokens_per_s"] > 0 and summary["peak_rss_mb"] > 0)
        # The final evaluation is the last row of /eval (the same model on the same held-out batches).
        with cc.open_metrics(os.path.join(run_dir, "metrics.h5")) as f:
            self.assertAlmostEqual(summary["eval_loss"], f["eval/loss"][-1], delta=1e-8 * f["eval/loss"][-1])
            self.assertAlmostEqual(summary["eval_token_acc"], f["eval/token_acc"][-1], delta=1e-9)
            config_attr = text(f.attrs["config"])

        with open(os.path.join(run_dir, "config.toml")) as f:
            config_text = f.read()
        self.assertEqual(config_text, config_attr)
        config = tomllib.loads(config_text)
        self.assertEqual(sorted(config), ["model", "optim", "run", "task", "train"])
        for key, value in DECODER.items():
            section, name = key.split(".")
            self.assertEqual(str(config[section][name]), value, key)
        self.assertEqual(config["run"]["out_dir"], self.path("runs"))

        # The resolved config is a valid config: train from it (a 1-step run elsewhere).
        out2 = self.path("again")
        self.run_ok(["train", os.path.join(run_dir, "config.toml"), f"run.out_dir={out2}", "train.steps=1"])
        with open(os.path.join(out2, "default", "config.toml")) as f:
            again = tomllib.loads(f.read())
        again["run"]["out_dir"], again["train"]["steps"] = config["run"]["out_dir"], config["train"]["steps"]
        self.assertEqual(again, config)


if __name__ == "__main__":
    cc.main()
