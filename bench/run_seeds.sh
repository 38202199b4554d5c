#!/usr/bin/env bash
# Eight seeds in one process (train.seeds) against eight separate runs at
# `attnlab sweep --jobs 2` (issue 32, part 3), on the small model and on the
# default experiment. Each setting trains the same eight runs (seeds 0-7, the
# same files bit for bit); what differs is how they share the machine:
#   sweep-j2        attnlab sweep over "run.seed" = [0..7], --jobs 2, one thread a cell
#   seeds-threads   attnlab train train.seeds=[0..7] train.threads=2 (members on the pool's threads)
#   seeds-stacked   the same with train.seeds_mode=stacked (one stacked model, one pass a step)
#   sweep-together  the sweep with --seeds-together: its eight cells are one group,
#                   one `attnlab train --runs` process on both cores (as seeds-threads)
# ROUNDS rounds (default 2), the settings in this order each round (A B C D A B C D),
# each after bench/quiet.sh's wait for quiet CPUs. Wall time and peak memory
# from /usr/bin/time -v; the table gives medians and each setting's throughput
# against sweep-j2 (higher is faster).
#
#   bench/run_seeds.sh        (from anywhere; about 8 minutes on 2 cores)
#
# Environment: BUILD_DIR (default build), ROUNDS, OUT (JSON lines; default
# BUILD_DIR/bench/seeds_results.jsonl).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
rounds=${ROUNDS:-2}
out=${OUT:-$build/bench/seeds_results.jsonl}
python=/usr/bin/python3
source "$root/bench/quiet.sh"
source "$root/bench/time_v.sh"
cmake --build "$build" --target attnlab -j2 >&2
attnlab=$build/attnlab
export OPENBLAS_NUM_THREADS=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '[sweep]\n"run.seed" = [0, 1, 2, 3, 4, 5, 6, 7]\n' > "$work/sweep.toml"
seeds="train.seeds=[0,1,2,3,4,5,6,7]"

# run WORKLOAD SETTING COMMAND...: one timed process, a JSON line appended to $out
run() {
  local workload=$1 setting=$2; shift 2
  rm -rf "$work/runs"
  wait_for_quiet
  echo "  $workload $setting: $*" >&2
  /usr/bin/time -v -o "$work/time.txt" "$@" > "$work/log.txt" 2>&1 || { cat "$work/log.txt" >&2; exit 1; }
  local wall peak_kb
  read -r wall peak_kb < <(time_v_read "$work/time.txt")
  printf '{"workload": "%s", "setting": "%s", "wall_s": %s, "peak_rss_kb": %s}\n' "$workload" "$setting" "$wall" "$peak_kb" >> "$out"
}

# workload NAME OVERRIDES...: every setting, ROUNDS rounds
workload() {
  local name=$1; shift
  echo "workload $name: $*" >&2
  for round in $(seq "$rounds"); do
    run "$name" sweep-j2 "$attnlab" sweep "$work/sweep.toml" --jobs 2 "$@" run.out_dir="$work/runs"
    run "$name" seeds-threads "$attnlab" train "$@" "$seeds" train.threads=2 run.out_dir="$work/runs"
    run "$name" seeds-stacked "$attnlab" train "$@" "$seeds" train.threads=2 train.seeds_mode=stacked run.out_dir="$work/runs"
    run "$name" sweep-together "$attnlab" sweep "$work/sweep.toml" --jobs 2 --seeds-together "$@" run.out_dir="$work/runs"
  done
}

mkdir -p "$(dirname "$out")"
: > "$out"
echo "load before: $(uptime)" >&2
# bench_train's small size (width 32, 2 heads, 1 layer, batch 32) on the default task
workload small model.width=32 model.heads=2 model.layers=1 model.ffn=128
workload default
echo "load after: $(uptime)" >&2
"$python" - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("| workload | setting | wall s (median) | throughput vs sweep-j2 | peak RSS MB |")
print("|---|---|---|---|---|")
for workload in dict.fromkeys(r["workload"] for r in rows):
    mine = [r for r in rows if r["workload"] == workload]
    med = {s: statistics.median(r["wall_s"] for r in mine if r["setting"] == s) for s in dict.fromkeys(r["setting"] for r in mine)}
    rss = {s: max(r["peak_rss_kb"] for r in mine if r["setting"] == s) / 1024 for s in med}
    for s, wall in med.items():
        print(f"| {workload} | {s} | {wall:.2f} | {med['sweep-j2'] / wall:.2f}x | {rss[s]:.0f} |")
EOF
