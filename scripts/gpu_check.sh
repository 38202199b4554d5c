#!/usr/bin/env bash
# Checks the CUDA backend on a GPU machine, from the folder scripts/gpu_pack.sh
# made (this script runs from its copy there):
#
#   .gpu/gpu_check.sh OUTDIR        # e.g. set -o pipefail; .gpu/gpu_check.sh $OUT 2>&1 | tee $OUT/gpu_check.log
#
# Unpacks libs.tar.xz to a temporary folder, finds the machine's cuBLAS 13,
# prints nvidia-smi, runs the kernel review's first tests (the attention
# agreement suite; compute-sanitizer racecheck, synccheck, memcheck and
# initcheck on three flash cases; the edge shapes; the device ops and one step;
# the kernels' resource table), then all CUDA tests (gtest JSON into OUTDIR), a smoke run
# of the attnlab CLI, the default experiment trained with train.device = "cuda"
# and on the CPU (runs/, train_default_*.log), eight seeds of it on the device in
# turn and stacked (train_seeds_*.log), then the benchmarks (ours: bench_attnlab.jsonl; torch
# SDPA: bench_sdpa.jsonl) and prints the table (table.md), then training steps
# of the toy decoders (train_gpu.jsonl, train_table.md). A few minutes.
# Exit status: 0 when every step passed; 1 when a test failed, no device was
# present (the tests then skip), or a benchmark failed; 2 on bad usage.
# Environment: PYTHON (default python3, the one with torch), COMPUTE_SANITIZER
# (default: found on PATH or in /usr/local/cuda*/bin), BENCH_ARGS
# (default none: 10 repetitions, all three shapes), SDPA_ARGS, TRAIN_SIZES
# (default "small medium large").
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-}"
if [[ -z "$out" ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
python=${PYTHON:-python3}
status=0

libs="$(mktemp -d)"
trap 'rm -rf "$libs"' EXIT
tar -C "$libs" -xJf "$here/libs.tar.xz" || { echo "gpu_check: cannot unpack $here/libs.tar.xz" >&2; exit 1; }

# cuBLAS 13 is not carried: the CUDA toolkit's, else the one pip's nvidia-cublas wheel holds (torch's).
cublas_dir=""
candidates=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64)
candidates+=($(ldconfig -p 2>/dev/null | awk '/libcublas\.so\.13 / { sub(/\/[^\/]*$/, "", $NF); print $NF }'))
candidates+=($("$python" -c 'import glob, site; print(" ".join(sorted({p.rsplit("/", 1)[0] for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/**/libcublas.so.13", recursive=True)})))' 2>/dev/null))
for dir in "${candidates[@]}"; do
  if [[ -e "$dir/libcublas.so.13" ]]; then
    cublas_dir="$dir"
    break
  fi
done
echo "gpu_check: libraries unpacked to $libs; cuBLAS 13 from ${cublas_dir:-(not found: the binaries will not start)}"
ours_path="$libs${cublas_dir:+:$cublas_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ours() { LD_LIBRARY_PATH="$ours_path" "$@"; }

echo "== nvidia-smi"
nvidia-smi 2>&1 | tee "$out/nvidia-smi.txt" || echo "gpu_check: nvidia-smi failed or is missing"

echo "== libraries of the binaries"
if ours ldd "$here/bin/test_cuda" "$here/bin/bench_attention_gpu" "$here/bin/bench_train" | grep 'not found'; then
  echo "gpu_check: libraries missing (above); stopping" >&2
  exit 1
fi

# The kernel review's first tests (../shared/tools/cuemu/REVIEW.md, tests/cuemu/README.md),
# most telling first: what the host emulation cannot see is hardware behaviour.
first() {  # first NAME FILTER [test_cuda options]: one group of test_cuda, its log and JSON in OUTDIR
  local name="$1" filter="$2"
  shift 2
  echo "== first tests: $name ($filter)"
  ours "$here/bin/test_cuda" --gtest_filter="$filter" --gtest_output="json:$out/first_$name.json" "$@" 2>&1 |
    tee "$out/first_$name.log" | grep -E '^\[  (PASSED|FAILED|SKIPPED) |^[a-z_]+kernel|^kernel '
  local rc=${PIPESTATUS[0]}
  if ((rc != 0)); then
    echo "gpu_check: first tests $name FAILED (exit $rc; $out/first_$name.log)"
    status=1
  fi
  if grep -q 'no CUDA device present' "$out/first_$name.log"; then
    echo "gpu_check: no CUDA device present: the device tests skipped; no benchmark run" >&2
    exit 1
  fi
}
# 1. both kernels against the CPU op: every mask kind, ragged tiles, invariances, non-finite inputs
first agreement 'Masks/*:Kernels/*:CudaDenseWeights.*'
# 2. what only compute-sanitizer sees: shared-memory races, barrier misuse, out-of-bounds and
#    uninitialised reads, on three flash cases (exact-size buffers: no caching allocator)
sanitizer="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}"
for candidate in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-13*/bin/compute-sanitizer; do
  [[ -z "$sanitizer" && -x "$candidate" ]] && sanitizer="$candidate"
done
flash_cases='Masks/*causal_and_padding_flash:Masks/*wide_heads_128_flash:Masks/*grouped_kv_6_over_2_padded_flash'
if [[ -z "$sanitizer" ]]; then
  echo "gpu_check: compute-sanitizer not found (PATH, /usr/local/cuda*/bin; set COMPUTE_SANITIZER): racecheck, synccheck, memcheck, initcheck did NOT run"
  status=1
else
  for tool in racecheck synccheck memcheck initcheck; do
    echo "== compute-sanitizer --tool $tool ($flash_cases)"
    ATTNLAB_NO_CUDA_CACHING=1 ours "$sanitizer" --tool "$tool" --error-exitcode 3 "$here/bin/test_cuda" \
      --gtest_filter="$flash_cases" > "$out/sanitizer_$tool.log" 2>&1
    rc=$?
    grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)|^\[  (PASSED|FAILED) ' "$out/sanitizer_$tool.log"
    if ((rc != 0)); then
      echo "gpu_check: compute-sanitizer --tool $tool FAILED (exit $rc; $out/sanitizer_$tool.log)"
      status=1
    fi
  done
fi
# 3. the shapes at the tiling's and the launch's edges
first shapes 'Shapes/*:CudaAttentionLimits.*'
# 4. every device op of a training step, then one whole step against the CPU
first ops_and_step 'DeviceOps.*:EngineDevice.*:Architectures/DeviceStepAgreement.OneStepGivesTheCpuLossGradientsAndUpdate/*'
# 5. registers, spills, shared memory and blocks per multiprocessor of each attention kernel
first resources 'CudaKernelResources.*'

echo "== test_cuda (all)"
ours "$here/bin/test_cuda" --gtest_output="json:$out/test_cuda.json" 2>&1 | tee "$out/test_cuda.log"
tests_rc=${PIPESTATUS[0]}
if ((tests_rc != 0)); then
  echo "gpu_check: test_cuda FAILED (exit $tests_rc)"
  status=1
fi

echo "== attnlab CLI smoke (gradcheck attention, CPU)"
ours "$here/bin/attnlab" gradcheck attention 2>&1 | tail -5 || { echo "gpu_check: attnlab CLI failed"; status=1; }

# The default experiment end to end, the whole step on the device, then on the
# CPU: the summary lines (accuracy, wall time, tokens/s) side by side.
echo "== attnlab train (the default experiment), train.device = cuda, then cpu"
for device in cuda cpu; do
  timeout 300 env LD_LIBRARY_PATH="$ours_path" "$here/bin/attnlab" train run.out_dir="$out/runs" \
    run.name="default-$device" train.device="$device" 2>&1 | tee "$out/train_default_$device.log" |
    grep -E '^attnlab train: train.device|^run '
  if ((PIPESTATUS[0] != 0)); then
    echo "gpu_check: attnlab train train.device=$device FAILED"
    status=1
  fi
done

# train.seeds on the device: eight members of the default experiment (300 steps)
# taking turns, then stacked (one pass a step for all of them, launches shared):
# wall time of each group and each member's summary line (the two modes' eval
# losses agree to float32 rounding).
echo "== attnlab train, train.device = cuda, train.seeds = 8 members: in turn, then stacked"
for mode in threads stacked; do
  started=$SECONDS
  timeout 300 env LD_LIBRARY_PATH="$ours_path" "$here/bin/attnlab" train run.out_dir="$out/runs" \
    run.name="seeds-$mode" train.device=cuda "train.seeds=[0,1,2,3,4,5,6,7]" train.seeds_mode="$mode" \
    train.steps=300 2>&1 | tee "$out/train_seeds_$mode.log" | grep -E '^run |steps stacked'
  rc=${PIPESTATUS[0]}
  echo "gpu_check: train.seeds_mode = $mode on the device: $((SECONDS - started)) s for 8 members (exit $rc)"
  ((rc == 0)) || { echo "gpu_check: attnlab train train.seeds_mode=$mode on the device FAILED"; status=1; }
done

# The analysis commands on the device (--device cuda) against the same on the
# CPU, on the CPU-trained run's checkpoint: eval and lens, each line side by side.
echo "== attnlab eval and lens, --device cuda then cpu"
for device in cuda cpu; do
  run="$out/runs/default-cpu"
  { timeout 120 env LD_LIBRARY_PATH="$ours_path" "$here/bin/attnlab" eval "$run" --device "$device" &&
    timeout 120 env LD_LIBRARY_PATH="$ours_path" "$here/bin/attnlab" lens "$run" --tokens "5 6 7 8" \
      --out "$out/lens_$device.h5" --device "$device"; } 2>&1 | tail -4 | tee "$out/analysis_$device.log"
  if ((PIPESTATUS[0] != 0)); then
    echo "gpu_check: attnlab eval/lens --device $device FAILED"
    status=1
  fi
done

echo "== bench_attention_gpu"
# shellcheck disable=SC2086
if ! ours "$here/bin/bench_attention_gpu" ${BENCH_ARGS:-} | tee "$out/bench_attnlab.jsonl"; then
  echo "gpu_check: bench_attention_gpu FAILED"
  status=1
fi

echo "== bench_sdpa.py (torch)"
# shellcheck disable=SC2086
if ! PYTHONUNBUFFERED=1 "$python" "$here/bench_sdpa.py" ${SDPA_ARGS:-} | tee "$out/bench_sdpa.jsonl"; then
  echo "gpu_check: bench_sdpa.py FAILED"
  status=1
fi

echo "== table"
"$python" "$here/gpu_table.py" "$out/bench_attnlab.jsonl" "$out/bench_sdpa.jsonl" | tee "$out/table.md"

# Training steps of the toy decoders: attnlab with train.device = "cuda" (the
# whole step on the GPU: the model moved with Module::to), attnlab's CPU path on every core, and
# the same model in PyTorch (eager) on the GPU.
echo "== training steps (bench_train, bench_train.py)"
cores=$(nproc)
: > "$out/train_gpu.jsonl"
for size in ${TRAIN_SIZES:-small medium large}; do
  ours "$here/bin/bench_train" --workload train --size "$size" --device cuda --threads "$cores" --seconds 2 \
    --label attnlab-cuda >> "$out/train_gpu.jsonl" || { echo "gpu_check: bench_train --device cuda ($size) FAILED"; status=1; }
  ours "$here/bin/bench_train" --workload train --size "$size" --threads "$cores" --seconds 2 \
    --label attnlab-cpu >> "$out/train_gpu.jsonl" || { echo "gpu_check: bench_train cpu ($size) FAILED"; status=1; }
  "$python" "$here/bench_train.py" --workload train --size "$size" --device cuda --seconds 2 \
    --label torch-cuda >> "$out/train_gpu.jsonl" || { echo "gpu_check: bench_train.py --device cuda ($size) FAILED"; status=1; }
done
"$python" "$here/train_gpu_table.py" "$out/train_gpu.jsonl" | tee "$out/train_table.md"
echo "gpu_check: done, exit $status; results in $out"
exit $status
