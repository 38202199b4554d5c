#!/usr/bin/env bash
# Two builds of attnlab against each other and against PyTorch, in one run: the
# guard rail of a refactor ("every ratio to PyTorch within 3% of before").
#
#   bench/compare_builds.sh BUILD_BEFORE BUILD_AFTER     (each a build folder with bench/bench_train)
#
# For each workload, ROUNDS rounds (default 3) of before, torch, after, each one
# process at one thread (OPENBLAS_NUM_THREADS=1, torch.set_num_threads(1)),
# after waiting for quiet CPUs (bench/quiet.sh). Prints per workload the median
# step time of each, torch/before, torch/after and after/before. Environment:
# ROUNDS, SECONDS_PER_RUN (default 3), OUT (JSON lines; default a temporary file).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 2 ] || { echo "usage: $0 BUILD_BEFORE BUILD_AFTER" >&2; exit 2; }
before=$1/bench/bench_train
after=$2/bench/bench_train
for b in "$before" "$after"; do [ -x "$b" ] || { echo "compare_builds.sh: no $b (build the bench_train target)" >&2; exit 2; }; done
rounds=${ROUNDS:-3}
seconds=${SECONDS_PER_RUN:-3}
out=${OUT:-$(mktemp /tmp/compare_builds.XXXXXX.jsonl)}
python=/usr/bin/python3
source "$root/bench/quiet.sh"

run() {  # run LABEL COMMAND...
  local label=$1; shift
  wait_for_quiet
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$@" --threads 1 --label "$label" --seconds "$seconds" >> "$out"
}

: > "$out"
for args in "--workload mha --shape 8,128,256,8" "--workload mha --shape 64,32,64,4" \
            "--workload train --size small" "--workload train --size medium" "--workload train --size large" \
            "--workload train --size nanogpt"; do
  echo "workload: $args" >&2
  for round in $(seq "$rounds"); do
    # shellcheck disable=SC2086
    run before "$before" $args
    # shellcheck disable=SC2086
    run torch "$python" "$root/bench/bench_train.py" $args
    # shellcheck disable=SC2086
    run after "$after" $args
  done
done
"$python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "median_s" in r]
keys = []
for r in rows:
    k = (r["workload"], r["shape"])
    if k not in keys:
        keys.append(k)
print("| workload | shape | before ms | torch ms | after ms | torch/before | torch/after | after/before |")
print("|---|---|---|---|---|---|---|---|")
for k in keys:
    med = {lab: statistics.median(r["median_s"] for r in rows if (r["workload"], r["shape"]) == k and r["label"] == lab) * 1e3
           for lab in ("before", "torch", "after")}
    print(f"| {k[0]} | {k[1]} | {med['before']:.3f} | {med['torch']:.3f} | {med['after']:.3f} | "
          f"{med['torch'] / med['before']:.3f} | {med['torch'] / med['after']:.3f} | {med['after'] / med['before']:.3f} |")
PY
