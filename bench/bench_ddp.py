"""bench_ddp.py: PyTorch's data parallelism on the CPU (DistributedDataParallel over
gloo) on the decoder training steps of bench_train.py, as the reference for
`mpirun -np N attnlab train` (bench/run_mpi.sh).

--ranks N processes on this machine (torch.multiprocessing), each with
torch.set_num_threads(--threads) and the global batch's B/N rows; DDP sums the
gradients in its buckets (an allreduce over gloo) during the backward. Prints
one JSON line: the median of the timed steps of rank 0, as steps per second.

    /usr/bin/python3 bench/bench_ddp.py --size medium --ranks 2 --threads 1
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train import SIZES, DecoderLM, time_steps  # noqa: E402  (the same model and timing)


def worker(rank, args, init_file, queue):
    torch.set_num_threads(args.threads)
    D, H, L, S, B, V = SIZES[args.size]
    if args.ranks > 1:
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=args.ranks)
    torch.manual_seed(1)
    model = DecoderLM(D, H, L, S, V)
    model.train()
    if args.ranks > 1:  # the causal mask is a bool buffer, which gloo cannot broadcast (and every rank has it)
        torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ["mask"])
    trained = torch.nn.parallel.DistributedDataParallel(model) if args.ranks > 1 else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    rows = B // args.ranks
    generator = torch.Generator().manual_seed(7)
    batches = []
    for _ in range(4):  # the same global batches on every rank, each rank its rows
        tokens, targets = torch.randint(0, V, (B, S), generator=generator), torch.randint(0, V, (B, S), generator=generator)
        batches.append((tokens[rank * rows:(rank + 1) * rows], targets[rank * rows:(rank + 1) * rows]))
    state = {"next": 0}

    def step():
        tokens, targets = batches[state["next"] % len(batches)]
        state["next"] += 1
        loss = F.cross_entropy(trained(tokens).reshape(-1, V), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    times = time_steps(step, args)
    if args.ranks > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        queue.put(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="medium", choices=sorted(SIZES))
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--min-reps", type=int, default=5)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    if args.ranks < 1 or SIZES[args.size][4] % args.ranks:
        parser.error(f"--ranks must divide the batch of {SIZES[args.size][4]}")
    args.device = "cpu"
    queue = mp.get_context("spawn").SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        if args.ranks == 1:
            worker(0, args, init_file, queue)
        else:
            mp.spawn(worker, args=(args, init_file, queue), nprocs=args.ranks, join=True)
    times = queue.get()
    print(json.dumps({"framework": "torch-ddp" if args.ranks > 1 else "torch", "label": args.label, "size": args.size,
                      "ranks": args.ranks, "threads": args.threads, "reps": len(times),
                      "steps_per_s": 1.0 / statistics.median(times)}), flush=True)


if __name__ == "__main__":
    main()
