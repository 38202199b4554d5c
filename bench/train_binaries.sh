#!/usr/bin/env bash
# Two attnlab binaries training one config, alternating A B A B: the wall time of
# N steps each (one thread), the median per binary and B/A. What a change to the
# training step costs or saves on a whole run, start-up and evaluation included.
#
#   bench/train_binaries.sh BINARY_A BINARY_B CONFIG.toml [KEY=VALUE ...]
#
# e.g. the output head only where the loss counts, on MQAR at Zoology's size:
#   bench/train_binaries.sh before/attnlab build/attnlab configs/published/mqar_zoology.toml train.steps=20
#
# Environment: ROUNDS (default 3). Each run trains into a fresh temporary folder
# with train.threads = 1, train.eval_every = train.steps (one evaluation at the
# end) and train.checkpoint_every = train.steps; /usr/bin/time -v gives its
# wall time and peak memory. Waits for quiet CPUs first (bench/quiet.sh).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 3 ] || { echo "usage: $0 BINARY_A BINARY_B CONFIG.toml [KEY=VALUE ...]" >&2; exit 2; }
a=$1 b=$2 config=$3
shift 3
for bin in "$a" "$b"; do [ -x "$bin" ] || { echo "train_binaries.sh: $bin is not an executable" >&2; exit 2; }; done
[ -f "$config" ] || { echo "train_binaries.sh: no config $config" >&2; exit 2; }
steps=20
extra=()  # the overrides but train.steps, which every run sets itself
for kv in "$@"; do
  case "$kv" in train.steps=*) steps=${kv#train.steps=} ;; *) extra+=("$kv") ;; esac
done
rounds=${ROUNDS:-3}
source "$root/bench/quiet.sh"
source "$root/bench/time_v.sh"
work=$(mktemp -d /tmp/train_binaries.XXXXXX)
trap 'rm -rf "$work"' EXIT

run() {  # run LABEL BINARY ROUND: prints "LABEL seconds peak_kb"
  local label=$1 bin=$2 round=$3
  wait_for_quiet
  /usr/bin/time -v -o "$work/time" "$bin" train "$config" "${extra[@]}" train.steps="$steps" train.eval_every="$steps" \
      train.checkpoint_every="$steps" train.threads=1 run.out_dir="$work/$label$round" > /dev/null 2>&1
  echo "$label $(time_v_read "$work/time")"
}

results=$work/results
for ((r = 0; r < rounds; r++)); do
  run A "$a" "$r" >> "$results"
  run B "$b" "$r" >> "$results"
done
/usr/bin/python3 - "$results" "$steps" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
steps = int(sys.argv[2])
med = {k: statistics.median(float(r[1]) for r in rows if r[0] == k) for k in ("A", "B")}
peak = {k: max(int(r[2]) for r in rows if r[0] == k) for k in ("A", "B")}
for k in ("A", "B"):
    print(f"{k}: median {med[k]:.2f} s for {steps} steps (all rounds: "
          f"{', '.join(r[1] for r in rows if r[0] == k)}), peak {peak[k] / 1024:.0f} MiB")
print(f"A/B wall time: {med['A'] / med['B']:.2f}x")
PY
