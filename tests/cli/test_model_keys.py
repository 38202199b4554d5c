"""Every model.* key of the schema through the PyTorch bridge and through each
export that accepts it, key by key.

The keys are the binary's (`attnlab train --keys`), each at the value
tests/model_key_changes.toml gives it and at every other choice --keys lists for
it: a key of the schema missing from that file fails the walk, and a new choice
is walked as soon as the schema lists it. For each, a small model trained a few
steps at a high rate (so that biases and norms are far from their start):

- bridge: tools/torch_bridge.py --compare on an `attnlab inspect` file of a
  right-padded batch holding <SEP> and <BOS>: the PyTorch module agrees (exit 0),
  or the bridge refuses in one line naming the key (exit 2, MODEL_KEYS and its
  value checks); never a model built without the option (exit 1);
- export: --format hf and tl each refuse in one line naming the key, or write
  files whose forward, computed by test_export.py's GPT-2 and TransformerLens
  forwards (written from those tools' documentation), gives the logits and
  attention patterns of `attnlab inspect` within 1e-5.

tests/experiments/test_config_reads.cpp walks the same keys through training,
export's refusals, stacked seeds and the audit.

    /usr/bin/python3 tests/cli/test_model_keys.py ATTNLAB_BINARY REPO_ROOT
"""
import contextlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import tomllib

import h5py
import numpy as np
import torch

import cli_common as cc
import test_export as export_forwards  # its GPT-2 and TransformerLens forwards, not its tests

TOLERANCE = 1e-5
# test_export.py's models: two layers, trained 10 steps at 0.01
BASE = export_forwards.BASE


def schema_model_keys():
    """{key: (default, [other choices])} of every model.* key `attnlab train --keys` lists,
    values as override text ('"post"', 'true')."""
    r = cc.attnlab(["train", "--keys"], cc.REPO_ROOT)
    assert r.returncode == 0, r.stderr
    keys = {}
    for line in r.stdout.splitlines():
        if not line.startswith("model."):
            continue
        key, default, meaning = re.split(r"\s{2,}", line, maxsplit=2)
        allowed = re.search(r"\(([^()]*)\)\s*$", meaning)
        parts = allowed.group(1).split(" | ") if allowed else []
        choices = [p for p in parts if re.fullmatch(r'"[^"]*"|true|false', p) and p != default]
        keys[key] = (default, choices)
    return keys


def model_settings():
    """[(key, value, {reading settings})]: every model key of the schema at the table's
    value and at each other choice. Raises when the table and the schema differ."""
    with open(os.path.join(cc.REPO_ROOT, "tests", "model_key_changes.toml"), "rb") as f:
        table = {"model." + k: v for k, v in tomllib.load(f)["model"].items()}
    schema = schema_model_keys()
    missing, stale = sorted(set(schema) - set(table)), sorted(set(table) - set(schema))
    if missing or stale:
        raise AssertionError(f"tests/model_key_changes.toml lacks {missing} (add each with a value and the settings "
                             f"that read it) and lists {stale}, which the schema does not have")
    settings = []
    for key, (_, choices) in schema.items():
        change = table[key]
        reading = dict(s.split("=", 1) for s in change.get("reading", []))
        for value in [change["value"]] + [c for c in choices if c != change["value"]]:
            settings.append((key, value, reading))
    return settings


def label(key, value):
    return re.sub(r"[^A-Za-z0-9]+", "_", f"{key}_{value}").strip("_")


def named(line, key, reading):
    """Whether a refusal names the key, or a key of the settings that read it."""
    return key in line or any(k in line for k in reading)


TRAINED = {}  # label -> (checkpoint, None) or (None, training's refusal)


def checkpoint(key, value, reading):
    """The last checkpoint of BASE trained with the setting (once per process), or
    the line with which training refused it."""
    name = label(key, value)
    if name not in TRAINED:
        if "root" not in TRAINED:
            TRAINED["root"] = tempfile.mkdtemp(prefix="attnlab_model_keys_")
        config = dict(BASE, **reading, **{key: value})
        out = os.path.join(TRAINED["root"], name)
        r = cc.attnlab(["train"] + cc.overrides(config, **{"run.out_dir": out}), TRAINED["root"], timeout=120)
        if r.returncode == 0:
            TRAINED[name] = (cc.checkpoint_path(os.path.join(out, "default"), int(BASE["train.steps"])), None)
        else:
            assert r.returncode == 2, f"attnlab train {key}={value}: exit {r.returncode}\n{r.stderr}"
            TRAINED[name] = (None, r.stderr.strip())
    return TRAINED[name]


def tearDownModule():
    if "root" in TRAINED:
        shutil.rmtree(TRAINED["root"], ignore_errors=True)


def inspect_batch(test, ckpt, enc_dec):
    """`attnlab inspect --input` of a right-padded batch (the decoder's rows hold <SEP> 1 and <BOS> 2)."""
    rng = np.random.default_rng(0)
    if enc_dec:
        tgt = rng.integers(3, 32, (3, 6))
        tgt[:, 0] = 2
        rows = {"src": rng.integers(3, 32, (3, 6)), "src_lengths": [6, 3, 1], "tgt": tgt, "tgt_lengths": [4, 6, 2]}
    else:
        tokens = rng.integers(3, 32, (3, 8))
        tokens[:2, 2], tokens[0, 4], tokens[0, 6], tokens[1, 3] = 1, 2, 1, 2  # x x SEP x BOS x SEP x; x x SEP BOS x
        rows = {"tokens": tokens, "lengths": [8, 5, 1]}
    given, out = test.path("batch_in.h5"), test.path("batch_out.h5")
    for path in (given, out):
        if os.path.exists(path):
            os.remove(path)
    with h5py.File(given, "w") as f:
        for name, value in rows.items():
            f[name] = np.asarray(value, dtype=np.int32 if "lengths" not in name else np.int64)
    test.run_ok(["inspect", ckpt, "--input", given, "--out", out])
    return out


def bridge(argv):
    """tools/torch_bridge.py's main in this process (one torch import for every key): (status, stdout, stderr)."""
    tools = os.path.join(cc.REPO_ROOT, "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import torch_bridge
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = torch_bridge.main(argv)
    return status, out.getvalue(), err.getvalue()


class ModelKeys(cc.TempDirTest):
    @classmethod
    def setUpClass(cls):
        cls.settings = model_settings()

    def each_trained(self):
        """(key, value, reading, checkpoint) of every setting training accepts; a refusal must be
        as unread (test_config_reads.cpp checks which)."""
        for key, value, reading in self.settings:
            ckpt, refused = checkpoint(key, value, reading)
            if ckpt is None:
                self.assertIn("only used when", refused, f"{key}={value}: training refused it for another reason")
                continue
            yield key, value, reading, ckpt

    def test_bridge_builds_each_key_or_refuses_it_by_name(self):
        agreed, refused = 0, []
        for key, value, reading, ckpt in self.each_trained():
            with self.subTest(key=key, value=value):
                enc_dec = "encoder-decoder" in value
                out = inspect_batch(self, ckpt, enc_dec)
                status, stdout, stderr = bridge([ckpt, "--compare", out])
                shown = f"{key}={value}: bridge exit {status}\n{stdout}{stderr}"
                self.assertIn(status, (0, 2), shown)
                if status == 2:
                    lines = stderr.strip().splitlines()
                    self.assertEqual(len(lines), 1, shown)
                    self.assertTrue(named(lines[0], key, reading), "refused without naming it: " + shown)
                    refused.append(f"{key}={value}")
                else:
                    agreed += 1
        print(f"\nthe bridge agrees with attnlab inspect on {agreed} settings and refuses {refused or 'none'}")
        self.assertGreater(agreed, 0)

    def test_each_accepted_export_computes_attnlab_logits(self):
        forwards = {"hf": export_forwards.gpt2_forward, "tl": export_forwards.tl_forward}
        checked = []
        for key, value, reading, ckpt in self.each_trained():
            tokens = logits = patterns = None
            for fmt, forward in forwards.items():
                with self.subTest(key=key, value=value, format=fmt):
                    folder = self.path(f"{fmt}_{label(key, value)}")
                    r = cc.attnlab(["export", ckpt, "--format", fmt, "--out", folder], self.tmp)
                    shown = f"{key}={value} --format {fmt}: exit {r.returncode}\n{r.stdout}{r.stderr}"
                    if r.returncode != 0:
                        self.assertEqual(r.returncode, 2, shown)
                        self.assertTrue(named(r.stderr, key, reading), "refused without naming it: " + shown)
                        continue
                    if tokens is None:
                        tokens, logits, patterns = self.inspect_full_rows(ckpt)
                    sd = export_forwards.read_safetensors(os.path.join(folder, "model.safetensors"))[0]
                    with open(os.path.join(folder, "config.json")) as f:
                        cfg = json.load(f)
                    with torch.no_grad():
                        ours, our_patterns, _ = forward(sd, cfg, tokens)
                    diff = float(np.abs(ours.numpy() - logits).max())
                    self.assertLess(diff, TOLERANCE, f"{shown}: logits differ by {diff}")
                    for l, (a, b) in enumerate(zip(patterns, our_patterns)):
                        np.testing.assert_allclose(b.numpy(), a, atol=TOLERANCE, err_msg=f"{shown}: pattern of layer {l}")
                    checked.append(f"{fmt} {key}={value}")
        print(f"\n{len(checked)} accepted exports checked against attnlab inspect: {', '.join(checked)}")
        self.assertGreater(len(checked), 0)

    def inspect_full_rows(self, ckpt):
        """Random full-length rows (what the exported causal models take) and attnlab's logits and patterns on them."""
        tokens = np.random.default_rng(1).integers(0, 32, size=(3, 12))
        given, out = self.path("full_in.h5"), self.path("full_out.h5")
        for path in (given, out):
            if os.path.exists(path):
                os.remove(path)
        with h5py.File(given, "w") as f:
            f["tokens"] = tokens
            f["lengths"] = np.full(3, 12)
        self.run_ok(["inspect", ckpt, "--input", given, "--out", out])
        with h5py.File(out, "r") as f:
            layers = len(f["attention/self"]) - 1  # and score_std
            return tokens, f["logits"][()], [f[f"attention/self/layer_{l}"][()] for l in range(layers)]


if __name__ == "__main__":
    cc.main()
