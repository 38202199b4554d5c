#!/usr/bin/python3
"""Exact all-edge path patching: `attnlab circuit` against a TransformerLens-style loop in PyTorch 1.13.

    /usr/bin/python3 bench/circuit_speed.py [--attnlab build/attnlab] [--threads 2] [--sample N]

Trains two models with the attnlab binary into a temporary folder (a 2-layer
attention-only model, width 64, 4 heads, and the default experiment's model at
4 layers and 8 heads, width 64, feed-forward 256), writes 32 prompt pairs of 32
tokens for each (the first half of the corrupted prompt redrawn), then:

  attnlab   `attnlab circuit CKPT --pairs P --metric prob`: every edge of the
            residual graph exactly (the time it prints for the edges, which the
            ratio uses, and the wall time of the whole process, loading included).
  PyTorch   the same model built by tools/torch_bridge.py, every edge by the
            textbook path-patching loop with forward hooks: per sender and
            receiver layer one run of the corrupted prompts with every
            component's output frozen at its corrupted value except the
            sender's (clean), reading the receivers' inputs (their q, k, v
            projections, the feed-forward's output, or the logits), then one
            patched run per edge with that receiver's activation replaced.
            --sample N times N edges chosen at random (seed 0) plus the frozen
            runs they need, and extrapolates to all edges (stated).

Both at --threads (default 2) threads. The PyTorch loop's effects are compared
with attnlab's (the largest absolute difference), which checks the exact
method against an independent implementation. Ratios: PyTorch's time over
attnlab's (higher: attnlab faster).
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import torch_bridge  # noqa: E402

MODELS = {
    "2-layer attention-only (width 64, 4 heads)": [
        "task.name=induction", "task.vocab=64", "task.max_len=16", "model.layers=2", "model.ffn=0", "model.width=64",
        "model.heads=4", "model.max_len=32", "train.steps=300"],
    "4-layer default size (width 64, 8 heads, ffn 256)": [
        "model.layers=4", "model.heads=8", "model.max_len=32", "train.steps=300"],
}


def train(binary, folder, name, overrides, threads):
    subprocess.run([binary, "train", *overrides, f"train.threads={threads}", f"run.name={name}", f"run.out_dir={folder}"],
                   check=True, stdout=subprocess.DEVNULL)
    checkpoints = os.path.join(folder, name, "checkpoints")
    return os.path.join(checkpoints, sorted(os.listdir(checkpoints))[-1])


def write_pairs(path, vocab, rng):
    clean = rng.integers(0, vocab, (32, 32))
    corrupt = clean.copy()
    corrupt[:, :16] = rng.integers(0, vocab, (32, 16))
    with h5py.File(path, "w") as f:
        f["clean"], f["corrupt"] = clean, corrupt


class Loop:
    """Path patching of one edge at a time with forward hooks (as TransformerLens users write it)."""

    def __init__(self, module, arch, circuit_file):
        self.m, self.arch = module, arch
        with h5py.File(circuit_file) as f:
            self.clean = torch.as_tensor(f["clean"][:])
            self.corrupt = torch.as_tensor(f["corrupt"][:])
            self.positions = f["positions"][:]
            self.answers = f["clean_answers"][:]
            self.edges = list(zip((s.decode() for s in f["edges/sender"][:]), (r.decode() for r in f["edges/receiver"][:])))
            self.attnlab_scores = f["edges/score"][:]
        self.lengths = torch.full((self.clean.shape[0],), self.clean.shape[1])
        self.dh = arch.head_width
        self.clean_acts = self.record(self.clean)
        self.corrupt_acts = self.record(self.corrupt)
        self.corrupt_metric = self.metric(self.forward(self.corrupt, []))

    def forward(self, tokens, handles_spec):
        handles = [mod.register_forward_hook(fn) if kind == "out" else mod.register_forward_pre_hook(fn)
                   for kind, mod, fn in handles_spec]
        try:
            with torch.no_grad():
                return self.m(tokens, self.lengths)[0]
        finally:
            for h in handles:
                h.remove()

    def metric(self, logits):
        rows = torch.arange(logits.shape[0])[:, None]
        p = torch.softmax(logits.double(), -1)[rows, torch.as_tensor(self.positions), torch.as_tensor(self.answers)]
        return p.mean().item()

    def record(self, tokens):
        acts = {}
        spec = [("out", self.m.pos_emb, lambda mod, a, out: acts.__setitem__("embed", out))]
        for l, b in enumerate(self.m.blocks):
            spec.append(("pre", b.attn.out_proj, lambda mod, a, l=l: acts.__setitem__(f"z{l}", a[0])))
            if b.ffn is not None:
                spec.append(("out", b.ffn, lambda mod, a, out, l=l: acts.__setitem__(f"mlp{l}", out)))
        self.forward(tokens, spec)
        return acts

    def frozen_run(self, sender, layer, read):
        """Corrupted prompts, every component frozen at its corrupted output except the sender (clean);
        records what `read` names in block `layer`: "q", "k", "v" projections or "ffn"."""
        got, spec = {}, []
        if sender == "embed":
            spec.append(("out", self.m.pos_emb, lambda mod, a, out: self.clean_acts["embed"]))
        for l, b in enumerate(self.m.blocks):
            def z_hook(mod, a, l=l):
                z = self.corrupt_acts[f"z{l}"].clone()
                if sender.count(".") == 1 and not sender.startswith("mlp") and int(sender.split(".")[0]) == l:
                    h = int(sender.split(".")[1])
                    z[..., h * self.dh:(h + 1) * self.dh] = self.clean_acts[f"z{l}"][..., h * self.dh:(h + 1) * self.dh]
                return (z,)
            if l < layer or (l == layer and read == "ffn"):
                spec.append(("pre", b.attn.out_proj, z_hook))
            if b.ffn is not None and l < layer:
                spec.append(("out", b.ffn, lambda mod, a, out, l=l: self.clean_acts[f"mlp{l}"] if sender == f"mlp.{l}" else self.corrupt_acts[f"mlp{l}"]))
        if layer < len(self.m.blocks):
            b = self.m.blocks[layer]
            target = {"q": b.attn.q_proj, "k": b.attn.k_proj, "v": b.attn.v_proj, "ffn": b.ffn}[read]
            spec.append(("out", target, lambda mod, a, out: got.__setitem__("act", out)))
            self.forward(self.corrupt, spec)
            return got["act"]
        return self.forward(self.corrupt, spec)  # the logits themselves

    def patched_run(self, receiver, activation):
        layer, what, head = self.parse_receiver(receiver)
        b = self.m.blocks[layer]
        if what == "ffn":
            spec = [("out", b.ffn, lambda mod, a, out: activation)]
        else:
            target = {"q": b.attn.q_proj, "k": b.attn.k_proj, "v": b.attn.v_proj}[what]

            def hook(mod, a, out):
                out = out.clone()
                out[..., head * self.dh:(head + 1) * self.dh] = activation[..., head * self.dh:(head + 1) * self.dh]
                return out
            spec = [("out", target, hook)]
        return self.metric(self.forward(self.corrupt, spec))

    def parse_receiver(self, receiver):
        if receiver == "logits":
            return len(self.m.blocks), "logits", 0
        if receiver.startswith("mlp."):
            return int(receiver[4:]), "ffn", 0
        lh, what = receiver.split(":")
        layer, head = lh.split(".")
        return int(layer), what, int(head)

    def effects(self, edge_indices):
        frozen = {}
        out = {}
        for i in edge_indices:
            sender, receiver = self.edges[i]
            layer, what, _ = self.parse_receiver(receiver)
            key = (sender, layer, what)
            if key not in frozen:
                frozen[key] = self.frozen_run(sender, layer, what)
            if what == "logits":
                out[i] = self.metric(frozen[key]) - self.corrupt_metric
            else:
                out[i] = self.patched_run(receiver, frozen[key]) - self.corrupt_metric
        return out, len(frozen)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attnlab", default=os.path.join(ROOT, "build", "attnlab"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sample", type=int, default=0, help="time N random edges in PyTorch and extrapolate (0: all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnlab_circuit_bench_") as folder:
        rng = np.random.default_rng(0)
        for index, (label, overrides) in enumerate(MODELS.items()):
            checkpoint = train(args.attnlab, folder, f"m{index}", overrides, args.threads)
            vocab = int(next(o.split("=")[1] for o in overrides if o.startswith("task.vocab=")) if any(
                o.startswith("task.vocab=") for o in overrides) else 32)
            pairs, out = os.path.join(folder, f"p{index}.h5"), os.path.join(folder, f"c{index}.h5")
            write_pairs(pairs, vocab, rng)
            start = time.perf_counter()
            printed = subprocess.run([args.attnlab, "circuit", checkpoint, "--pairs", pairs, "--metric", "prob", "--out", out,
                                      "--top", "0"], check=True, capture_output=True, text=True, env=env).stdout
            process = time.perf_counter() - start
            ours = float(printed.split(" edges in ")[1].split(" s")[0])  # the edges alone, as the loop below is timed
            module, arch, _, _ = torch_bridge.build_module(checkpoint)
            loop = Loop(module, arch, out)
            edges = list(range(len(loop.edges)))
            if args.sample and args.sample < len(edges):
                edges = sorted(random.Random(0).sample(edges, args.sample))
            start = time.perf_counter()
            effects, frozen_runs = loop.effects(edges)
            theirs = (time.perf_counter() - start) * len(loop.edges) / len(edges)
            diff = max(abs(effects[i] - loop.attnlab_scores[i]) for i in edges)
            runs = frozen_runs + sum(1 for i in edges if loop.edges[i][1] != "logits")
            rows.append((label, len(loop.edges), process, ours, theirs, len(loop.edges) / ours,
                         runs / (theirs * len(edges) / len(loop.edges)), diff, len(edges)))
    print(f"threads {args.threads}; attnlab {args.attnlab}; torch {torch.__version__}")
    print("| model | edges | attnlab process s | attnlab edges s | PyTorch loop s | ratio | attnlab edges/s | PyTorch runs/s "
          "| max abs diff | PyTorch edges timed |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, n, process, ours, theirs, eps, rps, diff, timed in rows:
        print(f"| {label} | {n} | {process:.2f} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f}x | {eps:.0f} | {rps:.0f} "
              f"| {diff:.1e} | {timed} |")


if __name__ == "__main__":
    main()
