"""bench_pointwise.py: bench_pointwise.cpp's activations in PyTorch (CPU, float32).

Same shape (rows of 512), warm-up and median; one JSON line per activation with
"framework": "torch". gelu is F.gelu(x), gelu_tanh F.gelu(x, approximate="tanh").

    /usr/bin/python3 bench/bench_pointwise.py --elements 524288 --threads 1
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def median_seconds(run, seconds, min_reps):
    for _ in range(3):
        run()
    times, start = [], time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=524288)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--min-reps", type=int, default=10)
    args = parser.parse_args()
    if args.elements <= 0 or args.elements % 512:
        parser.error("--elements must be a positive multiple of 512")
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    x_in = torch.randn(args.elements // 512, 512) * 2
    x = x_in.clone().requires_grad_(True)
    seed = torch.ones_like(x_in)
    activations = {"gelu": lambda t: F.gelu(t), "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}
    for name, f in activations.items():
        with torch.no_grad():
            forward = median_seconds(lambda: f(x_in), args.seconds, args.min_reps)

        def both():
            f(x).backward(seed)
            x.grad = None

        fwdbwd = median_seconds(both, args.seconds, args.min_reps)
        print(json.dumps({"framework": "torch", "activation": name, "elements": args.elements, "threads": args.threads,
                          "fwd_ns_per_element": forward / args.elements * 1e9,
                          "fwdbwd_ns_per_element": fwdbwd / args.elements * 1e9}), flush=True)


if __name__ == "__main__":
    main()
