#!/usr/bin/python3
"""Imported GPT-2-layout models: attnlab's Python module against PyTorch 1.13.

    PYTHONPATH=build/python /usr/bin/python3 bench/imported_models.py [--attnlab build/attnlab] [--repeats N]

Writes random GPT-2 models in Hugging Face's layout (config.json and
model.safetensors, with tests/cli/test_import.py's writer), imports each with
`attnlab import`, builds the same model in PyTorch with tools/torch_bridge.py
(their logits are checked to agree within 1e-4 of the largest first:
random weights of std 0.2 give logits in the hundreds; measured 1.2-1.5e-5), and times, one thread
each, in this one process, the median of --repeats calls after 10 warm-up calls:

  forward         logits of B prompts of T tokens: Model.run / the module's forward
  run_with_cache  the same, keeping every attention pattern and head output z
                  (PyTorch: hooks, as bench/python_hooks.py keeps them)

Models (issue 52, part 4): small (width 64, 2 layers, 4 heads, vocabulary 100,
T = 40, B = 1), where per-op cost dominates; gpt2-vocabulary (width 256, 4
layers, 4 heads, vocabulary 50257, T = 64, B = 1 and 32), where the output GEMM
does; each with GPT-2's activation (gelu_new: gelu_tanh) and, for the ratio the
issue asks, the same model with the exact gelu. Ratios are PyTorch's time over
attnlab's (higher: attnlab faster).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

import attnlab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "cli"))
import torch_bridge  # noqa: E402
from python_hooks import median_seconds, torch_cache  # noqa: E402  (bench/: its timer, and the hooks TransformerLens's HookPoints stand for)
from test_import import Draw, gpt2_state, save_model  # noqa: E402

MODELS = [  # name, width, layers, heads, vocabulary, T, batches
    ("small", 64, 2, 4, 100, 40, (1,)),
    ("gpt2-vocabulary", 256, 4, 4, 50257, 64, (1, 32)),
]


def imported(attnlab_bin, folder, name, width, layers, heads, vocab, T, activation):
    """A random GPT-2 written in Hugging Face's layout and imported: the checkpoint's path."""
    hf = os.path.join(folder, f"{name}-{activation}")
    cfg = {"model_type": "gpt2", "n_embd": width, "n_layer": layers, "n_head": heads, "vocab_size": vocab,
           "n_positions": max(T, 64), "activation_function": activation, "layer_norm_epsilon": 1e-5}
    save_model(hf, cfg, gpt2_state(Draw(1), cfg))
    out = hf + ".h5"
    subprocess.run([attnlab_bin, "import", hf, "--out", out], check=True, capture_output=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attnlab", default=os.path.join(ROOT, "build", "attnlab"))
    parser.add_argument("--repeats", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnlab_bench_imported_") as folder:
        for name, width, layers, heads, vocab, T, batches in MODELS:
            for activation in ("gelu_new", "gelu"):
                path = imported(args.attnlab, folder, name, width, layers, heads, vocab, T, activation)
                m = attnlab.load(path)
                module, arch, _, _ = torch_bridge.build_module(path)
                rng = np.random.default_rng(0)
                for B in batches:
                    tokens = rng.integers(0, vocab, size=(B, T)).astype(np.int32)
                    lengths = np.full(B, T)
                    names = "blocks.*.attn.pattern,blocks.*.attn.z"
                    with torch.no_grad():
                        theirs = torch_bridge.run(module, arch, {"tokens": tokens, "lengths": lengths})[0].numpy()
                        worst = float(np.abs(m.run(tokens) - theirs).max() / np.abs(theirs).max())
                        assert worst < 1e-4, f"{name} {activation}: the two models disagree by {worst:.2e} (relative)"
                        forward = (median_seconds(lambda: m.run(tokens), args.repeats, warmup=10),
                                   median_seconds(lambda: torch_bridge.run(module, arch, {"tokens": tokens, "lengths": lengths}),
                                                  args.repeats, warmup=10))
                        cache = (median_seconds(lambda: m.run_with_cache(tokens, names=names), args.repeats, warmup=10),
                                 median_seconds(lambda: torch_cache(module, arch, tokens, lengths), args.repeats, warmup=10))
                    for what, (a, b) in (("forward", forward), ("run_with_cache", cache)):
                        rows.append((name, activation, what, B, T, a, b))
    print(f"torch {torch.__version__}, one thread each; median of {args.repeats} calls")
    print("| model | activation | workload | B | T | attnlab | PyTorch | PyTorch / attnlab |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, activation, what, B, T, a, b in rows:
        print(f"| {name} | {activation} | {what} | {B} | {T} | {a * 1e3:.3f} ms | {b * 1e3:.3f} ms | {b / a:.2f}x |")


if __name__ == "__main__":
    main()
