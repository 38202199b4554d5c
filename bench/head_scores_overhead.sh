#!/usr/bin/env bash
# What train.head_scores costs: the same training run with and without the
# per-evaluation head scores (experiments/run/head_scores.h), A B A B, at
# several evaluation intervals; the overhead as a share of training time and
# per evaluation, in training steps.
#
#   bench/head_scores_overhead.sh [CONFIG]     (default configs/induction_bump.toml; about a minute)
#
# Each cell: the median of ROUNDS runs (default 5) of summary.json's wall_s
# (the whole run, evaluations included), one thread. Environment: BUILD_DIR
# (default build), ROUNDS, EVERY (the train.eval_every values, default "10 20 100").
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
rounds=${ROUNDS:-5}
every=${EVERY:-10 20 100}
config=${1:-$root/configs/induction_bump.toml}
python=/usr/bin/python3
source "$root/bench/quiet.sh"
[ -f "$config" ] || { echo "bench/head_scores_overhead.sh: no config $config" >&2; exit 2; }
cmake --build "$build" --target attnlab_cli -j2 >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# wall seconds of one run: eval_every, head_scores
run_once() {
  rm -rf "$work/out"
  "$build/attnlab" train "$config" train.threads=1 "train.eval_every=$1" "train.head_scores=$2" \
    run.out_dir="$work/out" run.name=r > /dev/null 2>&1
  "$python" -c "import json, sys; s = json.load(open(sys.argv[1])); print(s['wall_s'], s['steps'])" "$work/out/r/summary.json"
}

wait_for_quiet
printf "%-11s %-12s %-12s %-9s %s\n" "eval_every" "off (s)" "on (s)" "overhead" "per evaluation (steps)"
for e in $every; do
  : > "$work/off"; : > "$work/on"
  for _ in $(seq "$rounds"); do
    run_once "$e" false >> "$work/off"
    run_once "$e" true >> "$work/on"
  done
  "$python" - "$work/off" "$work/on" "$e" <<'PY'
import statistics, sys
off = [tuple(map(float, line.split())) for line in open(sys.argv[1])]
on = [tuple(map(float, line.split())) for line in open(sys.argv[2])]
every, steps = int(sys.argv[3]), off[0][1]
a, b = statistics.median(w for w, _ in off), statistics.median(w for w, _ in on)
evaluations = steps // every + 1  # the step-0 row as well
per_eval_steps = (b - a) / evaluations / (a / steps)
print(f"{every:<11} {a:<12.3f} {b:<12.3f} {100 * (b - a) / a:+7.1f}%  {per_eval_steps:.2f}")
PY
done
