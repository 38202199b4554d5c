#!/usr/bin/env bash
# nanoGPT's character model, end to end: configs/published/shakespeare_char.toml
# trained by attnlab against nanoGPT's own train.py (PyTorch 1.13, Debian's
# python3-torch) in its README's CPU setting, on the same input.txt, in one
# session: wall time of the whole run (evaluations included) and the final
# validation loss of each, at one and two threads.
#
#   bench/shakespeare_char.sh NANOGPT_DIR      (about 8 minutes a round on 2 cores)
#
# NANOGPT_DIR is a checkout of https://github.com/karpathy/nanoGPT with the
# tiny Shakespeare text at data/shakespeare_char/input.txt (its prepare.py
# downloads it; the URL is in the config's header); the script runs prepare.py
# there when train.bin is missing. nanoGPT's run writes only into a temporary
# folder (--out_dir).
#
# Settings, each one process, ROUNDS rounds (default 1), A B A B:
#   attnlab-1t, attnlab-2t        train.threads = 1 | 2
#   nanogpt-1t, nanogpt-2t        OMP_NUM_THREADS = 1 | 2 (torch's intra-op threads)
# Each line of the table: median wall seconds and the validation loss of the
# last round (attnlab: summary.json's eval_loss on 20 fixed held-out batches;
# nanoGPT: "step 2000: ... val loss", 20 fresh batches of the held-out tenth).
# Environment: BUILD_DIR (default build), ROUNDS.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
rounds=${ROUNDS:-1}
python=/usr/bin/python3
source "$root/bench/quiet.sh"

nanogpt=${1:?usage: bench/shakespeare_char.sh NANOGPT_DIR}
data="$nanogpt/data/shakespeare_char"
[ -f "$nanogpt/train.py" ] || { echo "bench/shakespeare_char.sh: $nanogpt has no train.py (a nanoGPT checkout?)" >&2; exit 2; }
[ -f "$data/input.txt" ] || { echo "bench/shakespeare_char.sh: no $data/input.txt (see configs/published/shakespeare_char.toml)" >&2; exit 2; }
[ -f "$data/train.bin" ] || (cd "$data" && "$python" prepare.py >&2)
cmake --build "$build" --target attnlab_cli -j2 >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results="$work/results.txt"

run_attnlab() {  # threads
  local out="$work/attnlab-$1" start end
  rm -rf "$out"
  start=$(date +%s.%N)
  "$build/attnlab" train "$root/configs/published/shakespeare_char.toml" "task.path=$data/input.txt" \
    "train.threads=$1" "run.out_dir=$out" > "$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  end=$(date +%s.%N)
  local loss
  loss=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['eval_loss'])" "$out/shakespeare_char/summary.json")
  echo "attnlab-$1t $(awk "BEGIN { print $end - $start }") $loss" >> "$results"
}

run_nanogpt() {  # threads
  local out="$work/nanogpt-$1" start end
  rm -rf "$out"
  start=$(date +%s.%N)
  (cd "$nanogpt" && OMP_NUM_THREADS=$1 MKL_NUM_THREADS=$1 "$python" train.py config/train_shakespeare_char.py \
    --device=cpu --compile=False --eval_iters=20 --log_interval=50 --block_size=64 --batch_size=12 --n_layer=4 \
    --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 --out_dir="$out") > "$work/log" 2>&1 \
    || { cat "$work/log" >&2; exit 1; }
  end=$(date +%s.%N)
  local loss
  loss=$(grep -o "step 2000: train loss [0-9.]*, val loss [0-9.]*" "$work/log" | sed 's/.*val loss //')
  echo "nanogpt-$1t $(awk "BEGIN { print $end - $start }") $loss" >> "$results"
}

for round in $(seq "$rounds"); do
  for setting in attnlab-1 nanogpt-1 attnlab-2 nanogpt-2; do
    wait_for_quiet
    echo "round $round: $setting" >&2
    "run_${setting%-*}" "${setting#*-}"
  done
done

"$python" - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, seconds, loss = line.split()
    rows.setdefault(name, []).append((float(seconds), float(loss)))
print("| setting | wall s (median) | final val loss | rounds |")
print("|---|---|---|---|")
for name in sorted(rows):
    print(f"| {name} | {statistics.median(s for s, _ in rows[name]):.1f} | {rows[name][-1][1]:.4f} | {len(rows[name])} |")
best = {impl: min(statistics.median(s for s, _ in r) for n, r in rows.items() if n.startswith(impl)) for impl in ("attnlab", "nanogpt")}
print(f"\nbest attnlab {best['attnlab']:.1f} s, best nanoGPT {best['nanogpt']:.1f} s: nanoGPT / attnlab = {best['nanogpt'] / best['attnlab']:.2f}")
EOF
