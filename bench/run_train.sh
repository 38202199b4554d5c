#!/usr/bin/env bash
# attnlab vs PyTorch on the CPU-performance issue's workloads: MultiHeadAttention
# forward+backward, decoder training steps (small, medium, large, and nanogpt: nanoGPT's
# shakespeare_char CPU setting without tied embeddings), and the peak
# memory of the attention op on its dense and blockwise paths as S grows.
#
#   bench/run_train.sh            (from anywhere; about 10 minutes on 2 cores)
#
# For each workload, ROUNDS rounds (default 2); in each round every setting
# runs once, in this order, one process each (A B A B ...):
#   attnlab-1t   attnlab, 1 thread
#   torch-1t     torch.set_num_threads(1), OpenBLAS 1 thread
#   attnlab-2t   attnlab, 2 threads (its pool; OpenBLAS kept at 1)
#   torch-2t-a   torch 1 thread, OpenBLAS 2 threads
#   torch-2t-b   torch 2 threads, OMP_WAIT_POLICY=PASSIVE, OpenBLAS 2
#   torch-2t-c   torch 2 threads, OpenBLAS 2
# PyTorch's two-core figure is the best of the three torch-2t settings, per
# workload. Before each process the script waits for quiet CPUs (bench/quiet.sh).
# The table (bench/train_table.py) gives medians, ratios, GFLOP/s next to the
# sgemm probe, and peak resident memory.
#
# Environment: BUILD_DIR (default build), ROUNDS, SECONDS_PER_RUN (default 3),
# OUT (JSON lines; default BUILD_DIR/bench/train_results.jsonl). ATTNLAB_ISA=avx2
# runs attnlab's AVX2 paths (its kernels and libxsmm's GEMM code) on an AVX-512
# CPU, to measure what an AVX2-only machine runs; the table's header names the
# set, the CPU, OpenBLAS's core and FMA peak. PyTorch runs with OpenBLAS's own
# choice of core unless OPENBLAS_CORETYPE is set (the header says which).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
rounds=${ROUNDS:-2}
seconds=${SECONDS_PER_RUN:-3}
out=${OUT:-$build/bench/train_results.jsonl}
python=/usr/bin/python3  # Debian's, with python3-torch
source "$root/bench/quiet.sh"

if [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" --target bench_train -j2 >&2

ours=("$build/bench/bench_train")
theirs=("$python" "$root/bench/bench_train.py")

# run LABEL ENV... -- COMMAND...: one process, its JSON lines appended to $out
run() {
  local label=$1; shift
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  wait_for_quiet
  echo "  $label: $*" >&2
  env "${env[@]}" "$@" --label "$label" --seconds "$seconds" >> "$out"
}

# workload WORKLOAD-ARGS...: every setting, ROUNDS rounds
workload() {
  echo "workload: $*" >&2
  for round in $(seq "$rounds"); do
    run attnlab-1t OPENBLAS_NUM_THREADS=1 -- "${ours[@]}" "$@" --threads 1
    run torch-1t OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 -- "${theirs[@]}" "$@" --threads 1
    run attnlab-2t OPENBLAS_NUM_THREADS=1 -- "${ours[@]}" "$@" --threads 2
    run torch-2t-a OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=1 -- "${theirs[@]}" "$@" --threads 1
    run torch-2t-b OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE -- "${theirs[@]}" "$@" --threads 2
    run torch-2t-c OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 -- "${theirs[@]}" "$@" --threads 2
  done
}

mkdir -p "$(dirname "$out")"
: > "$out"
echo "load before: $(uptime)" >&2
for shape in 8,128,256,8 8,512,256,8 4,1024,256,8 64,32,64,4; do workload --workload mha --shape "$shape"; done
for size in small medium large nanogpt; do workload --workload train --size "$size"; done
# Peak memory of attention forward+backward against S, (B, H, d) = (1, 8, 64), one step each
for S in 2048 4096 8192; do
  for path in blockwise dense; do
    run "memory-$path" OPENBLAS_NUM_THREADS=1 -- "${ours[@]}" --workload attention --shape "1,8,$S,64" --path "$path" \
      --threads 2 --warmup 0 --min-reps 1
  done
done
echo "load after: $(uptime)" >&2
echo "raw results: $out" >&2
"$python" "$root/bench/train_table.py" "$out"
