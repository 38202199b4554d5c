#!/usr/bin/env bash
# attnlab vs PyTorch on batched matmul and softmax at attention shapes.
#
#   bench/run_ops.sh [--seconds S] [--min-reps N] [--blocks B]   (options go to both benchmarks)
#
# Builds bench_ops if needed, then for 1 and 2 threads runs attnlab and PyTorch
# alternately (A B A B ..., ROUNDS rounds each, default 2) so that a change of
# machine load hits both, and prints one table (bench/ops_table.py).
#
# Other people's jobs on this machine disturb timings. Before each benchmark
# process the script waits (at most QUIET_WAIT s, default 300) until the CPUs
# are at most QUIET_BUSY percent busy (default 10). While it runs, the CPU time
# of the whole machine (/proc/stat) minus the process's own (bash `time`) is
# what others used; above QUIET_BUSY percent of the CPUs the process is run
# again, at most RETRIES times (default 2). This VM's two CPUs also sometimes
# deliver the throughput of one for minutes, which /proc/stat does not show:
# each benchmark times a 1024^3 sgemm at its start and end (the "probe"), and a
# process at N threads whose slower probe is under PROBE_FLOOR (default 0.7)
# x N x the median one-thread probe is run again too. Each attempt is logged.
#
# Environment: BUILD_DIR (default build), ROUNDS, OUT (JSON lines; default a
# file under BUILD_DIR/bench), QUIET_BUSY, QUIET_WAIT, RETRIES, PROBE_FLOOR.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
rounds=${ROUNDS:-2}
out=${OUT:-$build/bench/ops_results.jsonl}
python=/usr/bin/python3  # Debian's, with python3-torch
retries=${RETRIES:-2}
probe_floor=${PROBE_FLOOR:-0.7}
one_thread_probes=$(mktemp)  # slower probe of each accepted one-thread process
trap 'rm -f "$one_thread_probes"' EXIT
hz=$(getconf CLK_TCK)

# cpu_ticks, cpu_busy, wait_for_quiet
source "$root/bench/quiet.sh"

# Slower of a benchmark output's two probes, in GFLOP/s.
slower_probe() {
  grep '"probe"' "$1" | grep -o '"gflops": [0-9.]*' | cut -d' ' -f2 | sort -g | head -n 1
}

# "ok" or why the probe says the machine was slow: THREADS PROBE.
probe_verdict() {
  local reference
  reference=$(sort -g "$one_thread_probes" | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}')
  awk -v t="$1" -v p="$2" -v r="$reference" -v f="$probe_floor" 'BEGIN {
    if (r == "" || p >= f * t * r) print "ok"
    else printf "probe %.0f GFLOP/s < %.2f x %d x %.0f\n", p, f, t, r }'
}

# run_measured LABEL THREADS COMMAND...: runs COMMAND, appending its stdout to
# $out once others used at most QUIET_BUSY percent of the CPUs while it ran and
# its probe looks normal (or on the last attempt, saying so).
run_measured() {
  local label=$1 threads=$2 tmp busy0 total0 busy1 total1 user sys others rc probe verdict
  shift 2
  tmp=$(mktemp)
  for attempt in $(seq 0 "$retries"); do
    wait_for_quiet
    read -r busy0 total0 < <(cpu_ticks)
    rc=0
    { TIMEFORMAT="%U %S"; time "$@" > "$tmp" 2> "$tmp.err" || rc=$?; } 2> "$tmp.time"
    read -r busy1 total1 < <(cpu_ticks)
    cat "$tmp.err" >&2
    if [ "$rc" -ne 0 ]; then
      echo "run_ops.sh: $label failed (exit status $rc): $*" >&2
      rm -f "$tmp" "$tmp.err" "$tmp.time"
      exit 2
    fi
    read -r user sys < "$tmp.time"
    others=$(awk -v b=$((busy1 - busy0)) -v t=$((total1 - total0)) -v own="$user $sys" -v hz="$hz" \
      'BEGIN { split(own, o, " "); x = (b / hz - o[1] - o[2]) / (t / hz) * 100; printf "%d", x < 0 ? 0 : x }')
    probe=$(slower_probe "$tmp")
    verdict=$(probe_verdict "$threads" "$probe")
    [ "$others" -le "$quiet_busy" ] || verdict="others used ${others}% of the CPUs"
    echo "  $label: others ${others}% of the CPUs, slower probe ${probe%.*} GFLOP/s: $verdict" >&2
    if [ "$verdict" = ok ] || [ "$attempt" -eq "$retries" ]; then
      [ "$verdict" = ok ] || echo "  $label: kept, though disturbed (no retries left)" >&2
      [ "$threads" -ne 1 ] || [ "$verdict" != ok ] || echo "$probe" >> "$one_thread_probes"
      cat "$tmp" >> "$out"
      rm -f "$tmp" "$tmp.err" "$tmp.time"
      return
    fi
    echo "  $label: run again" >&2
  done
}

if [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" --target bench_ops -j2 >&2

mkdir -p "$(dirname "$out")"
: > "$out"
echo "load before: $(uptime)" >&2
for threads in 1 2; do
  # Both read these at start-up; each also sets its thread count itself.
  export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
  for round in $(seq "$rounds"); do
    run_measured "attnlab, $threads thread(s), round $round" "$threads" "$build/bench/bench_ops" --threads "$threads" "$@"
    run_measured "torch, $threads thread(s), round $round" "$threads" "$python" "$root/bench/bench_ops.py" --threads "$threads" "$@"
  done
done
echo "load after: $(uptime)" >&2
echo "raw results: $out" >&2
"$python" "$root/bench/ops_table.py" "$out"
