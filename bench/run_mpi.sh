#!/usr/bin/env bash
# Data parallelism on two cores: `mpirun -np 2 attnlab train` (1 thread per rank)
# against one process at 2 threads and at 1, with PyTorch's DistributedDataParallel
# (gloo, bench/bench_ddp.py) on the same model and batch in the same run; the
# cost of train.reduce = "deterministic"; and the sweep of
# configs/sweeps/heads_recall.toml under mpirun -np 2 against --jobs 2.
#
#   bench/run_mpi.sh              (from anywhere; about 15 minutes on 2 cores)
#
# attnlab trains the medium and large workloads of bench/run_train.sh (decoder,
# D=128 H=4 L=2, sequences of 64, batch 64; D=256 H=8 L=4, 128, batch 32) on the
# copy task (32 or 64 tokens, twice, so the inputs are exactly 64 or 128 long);
# its steps/s come from metrics.h5 (train/wall_s between the first and the last
# log row: no start-up, no evaluation, no checkpoint). ROUNDS rounds (default 3)
# of every setting, one after the other (A B C ... A B C ...), each after the
# CPUs are quiet (bench/quiet.sh); bench/mpi_table.py prints medians.
#
# Environment: BUILD_DIR (default build), ROUNDS, OUT (JSON lines; default
# BUILD_DIR/bench/mpi_results.jsonl), SWEEP=0 to skip the sweep.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
rounds=${ROUNDS:-3}
out=${OUT:-$build/bench/mpi_results.jsonl}
python=/usr/bin/python3
attnlab=$build/attnlab
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader
        --mca btl_vader_single_copy_mechanism none)
source "$root/bench/quiet.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
work=$(mktemp -d /tmp/attnlab_bench_mpi_XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$out")"
: > "$out"

workload() {  # the overrides of a size
  case "$1" in
    medium) echo task.name=copy task.vocab=32 task.min_len=32 task.max_len=32 model.width=128 model.heads=4 \
                 model.layers=2 model.ffn=512 train.batch=64 train.steps=40 train.log_every=10 ;;
    large)  echo task.name=copy task.vocab=32 task.min_len=64 task.max_len=64 model.width=256 model.heads=8 \
                 model.layers=4 model.ffn=1024 train.batch=32 train.steps=16 train.log_every=4 ;;
  esac
}

record() {  # record SETTING SIZE RUN_DIR: steps/s of the run from its metrics.h5
  "$python" - "$1" "$2" "$3" >> "$out" <<'PY'
import json, sys, h5py
setting, size, run = sys.argv[1:4]
with h5py.File(run + "/metrics.h5", "r") as f:
    step, wall = f["train/step"][()], f["train/wall_s"][()]
print(json.dumps({"setting": setting, "size": size, "steps_per_s": float((step[-1] - step[0]) / (wall[-1] - wall[0]))}))
PY
}

attnlab_run() {  # attnlab_run SETTING SIZE RANKS THREADS [key=value ...]
  local setting=$1 size=$2 ranks=$3 threads=$4; shift 4
  local name="${setting}_${size}_$RANDOM"
  local cmd=("$attnlab" train $(workload "$size") train.eval_every=100000 train.checkpoint_every=100000
             train.eval_batches=1 train.threads="$threads" run.out_dir="$work" run.name="$name" "$@")
  wait_for_quiet
  if ((ranks > 1)); then "${mpirun[@]}" -np "$ranks" "${cmd[@]}" > /dev/null 2>&1
  else "${cmd[@]}" > /dev/null 2>&1; fi
  record "$setting" "$size" "$work/$name"
  rm -rf "${work:?}/$name"
}

torch_run() {  # torch_run SETTING SIZE RANKS THREADS
  wait_for_quiet
  OPENBLAS_NUM_THREADS=$4 "$python" "$root/bench/bench_ddp.py" --size "$2" --ranks "$3" --threads "$4" --seconds 5 \
    --label "$1" | "$python" -c 'import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({"setting": d["label"], "size": d["size"], "steps_per_s": d["steps_per_s"]}))' >> "$out"
}

for size in ${SIZES:-medium large}; do
  for round in $(seq "$rounds"); do
    echo "run_mpi.sh: $size, round $round of $rounds" >&2
    attnlab_run attnlab-1p-1t "$size" 1 1
    attnlab_run attnlab-1p-2t "$size" 1 2
    attnlab_run attnlab-np2-1t "$size" 2 1
    attnlab_run attnlab-np2-1t-det "$size" 2 1 train.reduce=deterministic train.micro_batches=8
    attnlab_run attnlab-1p-1t-det "$size" 1 1 train.reduce=deterministic train.micro_batches=8
    torch_run torch-1p-1t "$size" 1 1
    torch_run torch-1p-2t "$size" 1 2
    torch_run torch-ddp-np2-1t "$size" 2 1
  done
done

if [[ "${SWEEP:-1}" != 0 ]]; then
  for setting in jobs2 np2; do
    echo "run_mpi.sh: sweep heads_recall, $setting" >&2
    wait_for_quiet
    start=$(date +%s.%N)
    if [[ $setting == jobs2 ]]; then
      "$attnlab" sweep "$root/configs/sweeps/heads_recall.toml" --jobs 2 run.out_dir="$work" > /dev/null 2>&1
    else
      "${mpirun[@]}" -np 2 "$attnlab" sweep "$root/configs/sweeps/heads_recall.toml" run.out_dir="$work" > /dev/null 2>&1
    fi
    end=$(date +%s.%N)
    ok=$(grep -c ',ok,' "$work/heads_recall/summary.csv" || true)
    echo "{\"setting\": \"sweep-$setting\", \"size\": \"heads_recall\", \"wall_s\": $(echo "$end - $start" | bc), \"cells_ok\": $ok}" >> "$out"
    rm -rf "${work:?}/heads_recall"
  done
fi
"$python" "$root/bench/mpi_table.py" "$out"
