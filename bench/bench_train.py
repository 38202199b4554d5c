"""bench_train.py: the workloads of bench_train.cpp in PyTorch (CPU, float32).

Same models, shapes, warm-up, timing and FLOP convention as bench_train.cpp,
and the same JSON lines with "framework": "torch". Run with Debian's
/usr/bin/python3 (python3-torch); bench/run_train.sh does, once per thread
setting (torch threads from --threads; OpenBLAS threads and OMP_WAIT_POLICY
from the environment).

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/bench_train.py --workload train --size small --threads 1
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 32
LABEL = [""]  # --label: which setting of the benchmark driver ran this process
SIZES = {  # D, H, L, S, B, V
    "small": (32, 2, 1, 16, 32, VOCAB),
    "medium": (128, 4, 2, 64, 64, VOCAB),
    "large": (256, 8, 4, 128, 32, VOCAB),
    # nanoGPT's shakespeare_char CPU setting, without its tied embeddings and dropout (as bench_train.cpp)
    "nanogpt": (128, 4, 4, 64, 12, 65),
}


def synchronize(args):
    """On the GPU a step has ended only when its queued kernels have."""
    if args.device == "cuda":
        torch.cuda.synchronize()


def time_steps(step, args):
    """Warm-up (at least 2 steps, --warmup s), then timed steps: at least
    --min-reps, until --seconds have passed. Returns each step's seconds."""
    start = time.perf_counter()
    n = 0
    while n < 2 or time.perf_counter() - start < args.warmup:
        step()
        n += 1
    synchronize(args)
    times = []
    start = time.perf_counter()
    while len(times) < args.min_reps or time.perf_counter() - start < args.seconds:
        t0 = time.perf_counter()
        step()
        synchronize(args)
        times.append(time.perf_counter() - t0)
    return times


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def print_result(workload, shape, flops, times, threads, device):
    med = statistics.median(times)
    print(json.dumps({
        "framework": "torch", "label": LABEL[0], "workload": workload, "shape": shape, "device": device,
        "threads": threads,
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "reps": len(times), "median_s": med, "steps_per_s": 1.0 / med, "gflops": flops / med * 1e-9,
        "peak_rss_mib": peak_rss_mib(), "times_s": [float(f"{t:.6g}") for t in times],
    }), flush=True)


def print_probe(when, threads):
    """The same 1024^3 sgemm probe as bench_common.h, through torch.mm."""
    a = torch.full((1024, 1024), 0.5)
    b = torch.full((1024, 1024), 0.25)
    times = []
    for _ in range(6):
        t0 = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"framework": "torch", "probe": when, "threads": threads,
                      "gflops": 2 * 1024 ** 3 / statistics.median(times[1:]) * 1e-9}), flush=True)


def causal_mask(S):
    """nn.MultiheadAttention's polarity: True = blocked (the opposite of attnlab's)."""
    return torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)


def window_mask(S, W):
    """The causal mask with a sliding window of W keys (attnlab's model.window): key j
    is blocked for query i unless i - W < j <= i. nn.MultiheadAttention's polarity."""
    i = torch.arange(S)[:, None]
    j = torch.arange(S)[None, :]
    return (j > i) | (j <= i - W)


def token_rules_mask(S, L, prefix_lm, documents):
    """The causal mask with attnlab's token rules on rows of documents of L tokens
    (bench_train.cpp's layout): documents (model.documents) keep each query in its
    own document; prefix-LM (model.prefix_lm) lets the first L/2 positions of each
    document read each other both ways. nn.MultiheadAttention's polarity."""
    i = torch.arange(S)[:, None]
    j = torch.arange(S)[None, :]
    same = (i // L) == (j // L)
    prefix = max(L // 2, 1)
    in_prefix = same & (j % L < prefix) & (i % L < prefix)
    blocked = (j > i) & ~(in_prefix if prefix_lm else torch.zeros_like(same))
    return blocked | (~same if documents else torch.zeros_like(same))


def bench_mha(B, S, D, H, args):
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(D, H, batch_first=True)
    x = torch.randn(B, S, D, requires_grad=True)
    L = args.documents or S  # one document a row for prefix-LM alone
    if args.prefix_lm or args.documents:
        mask = token_rules_mask(S, L, args.prefix_lm, args.documents > 0)
    else:
        mask = window_mask(S, args.window) if args.window > 0 else causal_mask(S)

    def step():
        out, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
        out.sum().backward()
        mha.zero_grad(set_to_none=True)
        x.grad = None

    flops = 3.0 * (8.0 * B * S * D * D + 4.0 * B * S * S * D)
    shape = f"B={B} S={S} D={D} H={H}" + (f" window={args.window}" if args.window > 0 else "") + \
        (" prefix_lm" if args.prefix_lm else "") + (f" documents L={args.documents}" if args.documents else "")
    return "mha", shape, flops, time_steps(step, args)


class Block(nn.Module):
    """Pre-LayerNorm decoder block: x + MHA(LN(x)), then x + FFN(LN(x))."""

    def __init__(self, D, H):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.ln2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class DecoderLM(nn.Module):
    def __init__(self, D, H, L, S, V):
        super().__init__()
        self.tok_emb = nn.Embedding(V, D)
        self.pos_emb = nn.Parameter(torch.randn(S, D))
        self.blocks = nn.ModuleList(Block(D, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.register_buffer("mask", causal_mask(S))

    def forward(self, tokens):
        x = self.tok_emb(tokens) + self.pos_emb[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln_f(x))


def bench_train_step(size, args):
    D, H, L, S, B, V = SIZES[size]
    torch.manual_seed(1)
    model = DecoderLM(D, H, L, S, V).to(args.device)
    model.train()
    # AdamW with attnlab's default split: no weight decay on vectors (biases, norms)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    batches = [(torch.randint(0, V, (B, S)).to(args.device), torch.randint(0, V, (B, S)).to(args.device))
               for _ in range(4)]
    state = {"next": 0}

    def step():
        tokens, targets = batches[state["next"] % len(batches)]
        state["next"] += 1
        logits = model(tokens)  # (B, S, V)
        loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    per_token = L * (24.0 * D * D + 4.0 * S * D) + 2.0 * D * V
    return (f"train_{size}", f"D={D} H={H} L={L} S={S} B={B}", 3.0 * per_token * B * S,
            time_steps(step, args))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=["mha", "train"])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--min-reps", type=int, default=5)
    parser.add_argument("--size", default="small", choices=sorted(SIZES))
    parser.add_argument("--shape", default="8,128,256,8", help="mha: B,S,D,H")
    parser.add_argument("--window", type=int, default=0, help="mha: a sliding window of W keys, as an explicit mask")
    parser.add_argument("--prefix-lm", action="store_true", help="mha: prefix-LM, each document's first half its prefix")
    parser.add_argument("--documents", type=int, default=0, help="mha: packed documents of L tokens each; 0 = off")
    parser.add_argument("--label", default="", help="a name for this setting, copied to the output")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="train: where the model runs")
    args = parser.parse_args()
    if args.device == "cuda" and args.workload != "train":
        parser.error("--device cuda is for --workload train")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this torch sees no CUDA device")
    LABEL[0] = args.label
    torch.set_num_threads(args.threads)
    print(json.dumps({"framework": "torch", "meta": True, "threads": args.threads,
                      "torch_version": torch.__version__,
                      "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                      "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}), flush=True)
    print_probe("start", args.threads)
    if args.workload == "mha":
        B, S, D, H = (int(v) for v in args.shape.split(","))
        result = bench_mha(B, S, D, H, args)
    else:
        result = bench_train_step(args.size, args)
    print_result(*result, args.threads, args.device)
    print_probe("end", args.threads)


if __name__ == "__main__":
    main()
