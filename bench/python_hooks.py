#!/usr/bin/python3
"""The Python module against PyTorch 1.13 with forward hooks, on the same models.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_hooks.py [--repeats N] [--out RESULTS.md-table]

Trains two checkpoints with attnlab.train into a temporary folder (the default
experiment, and configs/induction.toml), builds the same model in PyTorch with
tools/torch_bridge.py (its logits agree with attnlab's within 1e-4:
tests/cli/test_inspect_bridge.py), and times, one thread each, in this one process:

  cache     run_with_cache of every attention pattern and every head output z,
            on one prompt of the model's longest length (B = 1) and on 32 (B = 32).
            PyTorch: a forward hook on each attention module keeps its weights, a
            forward pre-hook on each output projection keeps its input (z), as
            TransformerLens's HookPoints keep activations.
  patching  activation patching of every head's z, one patched forward per
            (layer, head), clean prompt patched with the corrupted prompt's z
            (B = 1), the logit difference of two answers read from each.
            PyTorch: a forward pre-hook on the layer's output projection
            replaces that head's slice.
  overhead  per call, what the module adds to the engine's own forward on a
            one-token prompt: attnlab's Model.run minus the forward alone
            (Model._core.forward_seconds), in microseconds.

Each figure is the median over --repeats (default 200) timed calls after 20
warm-up calls. Ratios are PyTorch's time over attnlab's (higher: attnlab faster).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

import attnlab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import torch_bridge  # noqa: E402


def median_seconds(fn, repeats, warmup=20):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def torch_cache(module, arch, tokens, lengths):
    """PyTorch run-with-cache: hooks keep every attention's weights and z."""
    cache, handles = {}, []
    for l, block in enumerate(module.blocks):
        handles.append(block.attn.register_forward_hook(
            lambda mod, args, out, l=l: cache.__setitem__(f"blocks.{l}.attn.pattern", out[1])))
        handles.append(block.attn.out_proj.register_forward_pre_hook(
            lambda mod, args, l=l: cache.__setitem__(f"blocks.{l}.attn.z", args[0])))
    try:
        logits = torch_bridge.run(module, arch, {"tokens": tokens, "lengths": lengths})[0]
    finally:
        for h in handles:
            h.remove()
    return logits, cache


def torch_patched(module, arch, tokens, lengths, layer, head, d_head, source):
    """One forward with head `head` of `layer` given `source`'s z (B, T, H * d_head)."""
    def pre_hook(mod, args):
        z = args[0].clone()
        z[..., head * d_head:(head + 1) * d_head] = source[..., head * d_head:(head + 1) * d_head]
        return (z,)
    handle = module.blocks[layer].attn.out_proj.register_forward_pre_hook(pre_hook)
    try:
        return torch_bridge.run(module, arch, {"tokens": tokens, "lengths": lengths})[0]
    finally:
        handle.remove()


def bench_model(label, run, repeats, rows):
    m = attnlab.load(run)
    module, arch, _, _ = torch_bridge.build_module(m.path)
    L, H = m.config["model"]["layers"], m.config["model"]["heads"]
    V, T = m.config["task"]["vocab"], m.positions
    rng = np.random.default_rng(0)
    names = "blocks.*.attn.pattern,blocks.*.attn.z"
    for B in (1, 32):
        tokens = rng.integers(3, V, size=(B, T)).astype(np.int32)
        lengths = np.full(B, T)
        ours, theirs = m.run_with_cache(tokens, names=names), torch_cache(module, arch, tokens, lengths)
        assert np.allclose(ours[0], theirs[0].numpy(), atol=1e-4), "the two models disagree"
        a = median_seconds(lambda: m.run_with_cache(tokens, names=names), repeats)
        b = median_seconds(lambda: torch_cache(module, arch, tokens, lengths), repeats)
        rows.append((label, f"run_with_cache, B = {B}, T = {T}, {2 * L} points", a, b))

    clean = rng.integers(3, V, size=(1, T)).astype(np.int32)
    corrupt = clean.copy()
    corrupt[0, : T // 2] = rng.integers(3, V, size=T // 2)
    lengths = np.full(1, T)
    d_head = m.config["model"]["width"] // H
    _, corrupt_cache = m.run_with_cache(corrupt, names="blocks.*.attn.z")
    _, torch_corrupt = torch_cache(module, arch, corrupt, lengths)
    answer, wrong = 3, 4

    def ours():
        diffs = []
        for l in range(L):
            source = corrupt_cache[f"blocks.{l}.attn.z"]
            for h in range(H):
                def replace(z, name, h=h, source=source):
                    z = z.copy()
                    z[:, :, h] = source[:, :, h]
                    return z
                logits = m.run_with_hooks(clean, {f"blocks.{l}.attn.z": replace})
                diffs.append(logits[0, -1, answer] - logits[0, -1, wrong])
        return diffs

    def theirs():
        diffs = []
        for l in range(L):
            for h in range(H):
                logits = torch_patched(module, arch, clean, lengths, l, h, d_head, torch_corrupt[f"blocks.{l}.attn.z"])
                diffs.append(float(logits[0, -1, answer] - logits[0, -1, wrong]))
        return diffs
    assert np.allclose(ours(), theirs(), atol=1e-4), "the patched runs disagree"
    a = median_seconds(ours, max(10, repeats // 10), warmup=3)
    b = median_seconds(theirs, max(10, repeats // 10), warmup=3)
    rows.append((label, f"patching loop: {L * H} patched forwards, B = 1, T = {T}", a, b))

    one = np.array([[3]], dtype=np.int32)
    engine = m._core.forward_seconds(one, [1], 2000)
    call = median_seconds(lambda: m.run(one), repeats * 5)
    core = median_seconds(lambda: m._core.run(one, [1], [], [], None, []), repeats * 5)
    rows.append((label, f"per call: engine forward alone {engine * 1e6:.1f} us; the module adds "
                        f"{(call - engine) * 1e6:.1f} us (Model.run), {(core - engine) * 1e6:.1f} us (_core.run)", call, None))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnlab_bench_python_") as folder:
        runs = {"default": attnlab.train(overrides={"run.out_dir": folder, "run.name": "default", "train.threads": 1}, quiet=True),
                "induction": attnlab.train(os.path.join(ROOT, "configs", "induction.toml"),
                                           overrides={"run.out_dir": folder, "train.threads": 1}, quiet=True)}
        for label, run in runs.items():
            bench_model(label, run, args.repeats, rows)
    print(f"torch {torch.__version__}, one thread each; median of {args.repeats} calls (patching: of {max(10, args.repeats // 10)} loops)")
    print("| model | workload | attnlab | PyTorch + hooks | PyTorch / attnlab |")
    print("| --- | --- | ---: | ---: | ---: |")
    for label, what, a, b in rows:
        if b is None:
            print(f"| {label} | {what} | {a * 1e6:.1f} us | | |")
        else:
            print(f"| {label} | {what} | {a * 1e3:.3f} ms | {b * 1e3:.3f} ms | {b / a:.2f}x |")


if __name__ == "__main__":
    main()
