"""bench_sdpa.py: torch.nn.functional.scaled_dot_product_attention(is_causal=True)
on the GPU, forward and forward+backward, at bench_attention_gpu's shapes; one
JSON line per measurement in the same format (gpu_table.py joins them).

    python3 bench/gpu/bench_sdpa.py [--reps N] [--quick] [--dtypes float32,bfloat16]

float32 is the like-for-like comparison with our fp32 kernels; bfloat16 is
torch alone (we have no bf16 kernel), labelled by its dtype.

FLOP convention (the same as bench_attention_gpu.cpp): a full forward is
4 B H S^2 d; causal counts half; the backward 2.5x the forward, so
forward+backward is 3.5x. TFLOP/s = FLOPs / median time.
"""
import argparse
import json
import math
import sys

SHAPES = [(8, 8, 1024, 64), (4, 8, 4096, 64), (1, 8, 16384, 64)]


def forward_flops(B, H, S, d):
    return 0.5 * 4.0 * B * H * S * S * d


def time_cuda(torch, reps, work):
    """Median and minimum milliseconds over reps runs, each between two CUDA events."""
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2], times[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="the first shape only")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    args = parser.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as error:
        print(f"bench_sdpa.py: {error}", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("bench_sdpa.py: torch sees no CUDA device", file=sys.stderr)
        return 1
    device = torch.cuda.get_device_name(0)
    shapes = SHAPES[:1] if args.quick else SHAPES
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for B, H, S, d in shapes:
            gen = torch.Generator(device="cuda").manual_seed(1)
            q, k, v, dout = (torch.rand(B, H, S, d, device="cuda", generator=gen, dtype=torch.float32)
                             .mul_(2).sub_(1).to(dtype) for _ in range(4))
            q.requires_grad_(True)
            k.requires_grad_(True)
            v.requires_grad_(True)
            scale = 1.0 / math.sqrt(d)

            def forward():
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)

            def forward_backward():
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
                out.backward(dout)

            forward_backward()  # warm-up
            torch.cuda.synchronize()
            flops = forward_flops(B, H, S, d)
            for name, work, f in (("fwd", forward, flops), ("fwd+bwd", forward_backward, 3.5 * flops)):
                median, minimum = time_cuda(torch, args.reps, work)
                print(json.dumps({"framework": "torch", "impl": "sdpa", "dtype": dtype_name, "device": device,
                                  "B": B, "H": H, "S": S, "d": d, "causal": True, "pass": name,
                                  "ms": round(median, 4), "ms_min": round(minimum, 4), "reps": args.reps,
                                  "tflops": round(f / (median * 1e9), 3), "torch": torch.__version__}), flush=True)
            del q, k, v, dout
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
