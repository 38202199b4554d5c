#!/usr/bin/env bash
# Where a training step's instructions go: callgrind counts (stable on a noisy
# machine, unlike wall time) of bench_train's decoder training step, per function,
# per step. Two runs of N1 and N2 timed steps; their difference over N2 - N1 steps
# leaves out start-up, model construction and warm-up.
#
#   bench/profile_step.sh small 10 40        (about 1.5 minutes; needs valgrind: apt-get install valgrind)
#   bench/profile_step.sh nanogpt 3 9        (about 15 minutes)
#
# Environment: BUILD_DIR (default build), OUT (default BUILD_DIR/bench/profile).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
size=${1:?usage: bench/profile_step.sh SIZE N1 N2}
n1=${2:?usage: bench/profile_step.sh SIZE N1 N2}
n2=${3:?usage: bench/profile_step.sh SIZE N1 N2}
out=${OUT:-$build/bench/profile}
command -v valgrind > /dev/null || { echo "profile_step.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
cmake --build "$build" --target bench_train -j2 >&2
mkdir -p "$out"
for n in "$n1" "$n2"; do
  valgrind --tool=callgrind --callgrind-out-file="$out/$size.$n.callgrind" "$build/bench/bench_train" --workload train \
    --size "$size" --seconds 0 --warmup 0 --min-reps "$n" --threads 1 --no-probe > "$out/$size.$n.json" 2> "$out/$size.$n.log" &
done
wait
/usr/bin/python3 "$root/bench/callgrind_diff.py" "$out/$size.$n1.callgrind" "$out/$size.$n2.callgrind" $((n2 - n1))
