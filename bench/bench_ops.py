"""bench_ops.py: the workloads of bench_ops.cpp in PyTorch (CPU, float32).

Same shapes, workload names, warm-up, turns and median method as
bench_ops.cpp, and the same JSON lines with "framework": "torch", so that
bench/ops_table.py can pair them. Run with Debian's /usr/bin/python3
(python3-torch); bench/run_ops.sh does.

    /usr/bin/python3 bench/bench_ops.py --threads 1
"""
import argparse
import ctypes
import json
import math
import statistics
import sys
import time

import torch


class Workload:
    """One timed workload. `run` returns what must outlive the timer (its
    output), so that freeing it is not timed; `reset` (untimed) drops
    accumulated gradients between repetitions."""

    def __init__(self, name, flops, gbytes, run, reset=lambda: None):
        self.name, self.flops, self.bytes, self.run, self.reset = name, flops, gbytes, run, reset
        self.times = []


def seconds_of(w):
    start = time.perf_counter()
    out = w.run()
    stop = time.perf_counter()
    del out
    w.reset()
    return stop - start


def measure_group(group, args):
    """Warm up each workload, then time its reps in `args.blocks` turns, the
    group's workloads alternating (as bench_ops.cpp does)."""
    reps = []
    for w in group:
        warm = []
        while len(warm) < 2 or sum(warm) < args.warmup_seconds:
            warm.append(seconds_of(w))
        estimate = statistics.median(warm[1:])
        wanted = math.ceil(args.seconds / max(estimate, 1e-9))
        reps.append(min(max(wanted, args.min_reps), args.max_reps))
    for turn in range(1, args.blocks + 1):
        for w, n in zip(group, reps):
            until = -(-n * turn // args.blocks)  # ceil(n * turn / blocks)
            while len(w.times) < until:
                w.times.append(seconds_of(w))


def print_measurement(w, batch, seq, head, threads):
    med = statistics.median(w.times)
    print(json.dumps({
        "framework": "torch", "workload": w.name, "batch": batch, "seq": seq, "head": head,
        "threads": threads, "reps": len(w.times), "median_s": med,
        "gflops": w.flops / med * 1e-9 if w.flops else None,
        "gbytes_s": w.bytes / med * 1e-9 if w.bytes else None,
        "times_s": [float(f"{t:.6g}") for t in w.times],
    }), flush=True)


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def drop_grads(*tensors):
    def reset():
        for t in tensors:
            t.grad = None
    return reset


def backward_through(out, seed):
    out.backward(seed)
    return out


def bench_shape(batch, seq, head, args):
    B, S, d = batch, seq, head
    product_flops = 2.0 * B * S * S * d  # both products: B (S,S,d) multiply-adds
    probs_bytes = 4.0 * B * S * S        # one pass over a (B,S,S) float32 tensor

    q_in = torch.randn(B, S, d)                        # (B,S,d)
    k_in = torch.randn(B, S, d)                        # (B,S,d)
    kt_in = k_in.transpose(-1, -2).contiguous()        # (B,d,S)
    v_in = torch.randn(B, S, d)                        # (B,S,d)
    probs_in = torch.rand(B, S, S)                     # (B,S,S)
    logits_in = torch.randn(B, S, S)                   # (B,S,S)
    q, k, kt, v, probs, logits = (leaf(t) for t in (q_in, k_in, kt_in, v_in, probs_in, logits_in))
    seed = torch.ones(B, S, S)          # d(sum of outputs)/d(output) for (B,S,S) outputs
    context_seed = torch.ones(B, S, d)

    groups = [
        [Workload("scores_fwd", product_flops, 0, lambda: torch.matmul(q_in, k_in.transpose(-1, -2))),
         Workload("scores_mm_fwd", product_flops, 0, lambda: torch.matmul(q_in, kt_in))],
        [Workload("context_fwd", product_flops, 0, lambda: torch.matmul(probs_in, v_in))],
        [Workload("scores_fwdbwd", 3 * product_flops, 0,
                  lambda: backward_through(torch.matmul(q, k.transpose(-1, -2)), seed), drop_grads(q, k)),
         Workload("scores_mm_fwdbwd", 3 * product_flops, 0,
                  lambda: backward_through(torch.matmul(q, kt), seed), drop_grads(q, kt))],
        [Workload("context_fwdbwd", 3 * product_flops, 0,
                  lambda: backward_through(torch.matmul(probs, v), context_seed), drop_grads(probs, v))],
        [Workload("softmax_fwd", 0, 2 * probs_bytes, lambda: torch.softmax(logits_in, -1))],
        [Workload("softmax_fwdbwd", 0, 5 * probs_bytes,
                  lambda: backward_through(torch.softmax(logits, -1), seed), drop_grads(logits))],
    ]
    for group in groups:
        measure_group(group, args)
        for w in group:
            print_measurement(w, B, S, d, args.threads)


def print_probe(when, threads):
    """The machine's GEMM speed now: one 1024^3 sgemm (torch.mm into a
    preallocated output), median of 5, as bench_ops.cpp's probe."""
    n = 1024
    a, b, c = torch.full((n, n), 0.5), torch.full((n, n), 0.25), torch.empty(n, n)
    times = []
    for _ in range(6):
        start = time.perf_counter()
        torch.mm(a, b, out=c)
        times.append(time.perf_counter() - start)
    gflops = 2.0 * n ** 3 / statistics.median(times[1:]) * 1e-9
    print(json.dumps({"framework": "torch", "probe": when, "threads": threads, "gflops": gflops}), flush=True)


def openblas_info():
    """Core type and config of the OpenBLAS that torch's BLAS calls land in."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        return lib, lib.openblas_get_corename().decode(), lib.openblas_get_config().decode()
    except (OSError, AttributeError):
        return None, None, None


def main():
    parser = argparse.ArgumentParser(description="PyTorch matmul and softmax at attention shapes")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=0.3, help="target seconds per measurement")
    parser.add_argument("--min-reps", type=int, default=5)
    parser.add_argument("--max-reps", type=int, default=400)
    parser.add_argument("--warmup-seconds", type=float, default=0.1)
    parser.add_argument("--blocks", type=int, default=3, help="turns each workload's reps are split into")
    args = parser.parse_args()
    if min(args.threads, args.min_reps, args.blocks) < 1:
        sys.exit("bench_ops.py: --threads, --min-reps and --blocks must be at least 1")

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set in this process
    lib, corename, config = openblas_info()
    if lib is not None:  # torch's GEMMs go to OpenBLAS, whose pool torch does not size
        lib.openblas_set_num_threads(args.threads)
    torch.set_grad_enabled(True)
    print(json.dumps({
        "framework": "torch", "meta": True, "threads": args.threads, "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "openblas_corename": corename, "openblas_config": config,
        "blas_threads": lib.openblas_get_num_threads() if lib is not None else None,
    }), flush=True)

    # A fresh process's first GEMMs are much slower: run the largest product,
    # forward and backward, for a while first (as bench_ops.cpp does).
    a, b = leaf(torch.randn(64, 512, 64)), leaf(torch.randn(64, 64, 512))
    ones = torch.ones(64, 512, 512)
    start = time.perf_counter()
    while time.perf_counter() - start < 0.5:
        torch.matmul(a, b).backward(ones)
    del a, b, ones

    print_probe("start", args.threads)
    torch.manual_seed(2024)
    for seq in (128, 512):
        for head in (32, 64):
            bench_shape(64, seq, head, args)
    print_probe("end", args.threads)


if __name__ == "__main__":
    main()
