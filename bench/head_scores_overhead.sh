#!/usr/bin/env bash
# What train.head_scores costs: one evaluation's head scores
# (experiments/run/head_scores.h), in milliseconds and in training steps, and
# the share of training time that makes at several evaluation intervals.
#
#   bench/head_scores_overhead.sh [CONFIG]     (default configs/induction_bump.toml; about two minutes)
#
# Measured where the scores are most of the difference: the config trained with
# an evaluation at every step, with and without train.head_scores, ROUNDS times
# each (default 5) in turn; one evaluation's scores = the difference of the
# medians of summary.json's wall_s over the evaluations; a step's time from the
# config run with one evaluation. The share at train.eval_every = E is then
# (one evaluation's scores) / (E steps). One thread. Environment: BUILD_DIR
# (default build), ROUNDS, EVERY (the intervals to report, default "10 20 100").
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
# One evaluation's head scores, measured where they are most of the difference:
# an evaluation at every step (on - off) / evaluations; a training step's own
# time from runs with a single evaluation, at the end.
steps=$("$python" -c "import tomllib, sys; print(tomllib.load(open(sys.argv[1], 'rb')).get('train', {}).get('steps', 1500))" "$config")
: > "$work/every_off"; : > "$work/every_on"; : > "$work/none"
for _ in $(seq "$rounds"); do
  run_once 1 false >> "$work/every_off"
  run_once 1 true >> "$work/every_on"
  run_once "$steps" false >> "$work/none"
done
"$python" - "$work/every_off" "$work/every_on" "$work/none" "$every" <<'PY'
import statistics, sys
median = lambda path: statistics.median(float(line.split()[0]) for line in open(path))
off, on, plain = median(sys.argv[1]), median(sys.argv[2]), median(sys.argv[3])
steps = int(float(open(sys.argv[3]).readline().split()[1]))
per_eval, per_step = (on - off) / (steps + 1), plain / steps
print(f"one evaluation's head scores: {per_eval * 1e3:.3f} ms = {per_eval / per_step:.2f} training steps of {per_step * 1e3:.3f} ms "
      f"(evaluating every step: {off:.3f} s without, {on:.3f} s with; {steps} steps alone: {plain:.3f} s)")
for every in sys.argv[4].split():
    print(f"  train.eval_every = {every}: the head scores add {100 * per_eval / (every_ := int(every)) / per_step:.1f}% to the training steps")
PY
