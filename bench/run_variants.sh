#!/usr/bin/env bash
# Attention variants (autograd/variant.h) against the plain causal path on the CPU,
# and against PyTorch where nn.MultiheadAttention can express the variant with an
# explicit mask: MultiHeadAttention forward+backward at the mha workloads' shapes,
# one thread, processes alternating (A B A B ...) for ROUNDS rounds; then the
# attention op's peak memory on the blockwise path against S, with and without a
# sliding window.
#
#   bench/run_variants.sh          (about 4 minutes on 2 cores)
#
# Settings per shape: attnlab causal, attnlab window=16, attnlab softcap=30 (in the
# fused kernels since issue 52), sinks and T5's relative bias with 32 buckets (both
# composed of ops), prefix-LM (each
# row's first half its prefix) and packed documents of 16 tokens, torch causal, torch window=16, prefix-LM and documents (each an
# explicit (S, S) mask). Softcapping, sinks and T5's bias have
# no PyTorch 1.13 nn.MultiheadAttention form short of writing attention out, so
# they are compared with attnlab's own causal path only.
# Environment: BUILD_DIR (default build), ROUNDS (default 3), SECONDS_PER_RUN (default 2),
# OUT (JSON lines; default BUILD_DIR/bench/variants_results.jsonl).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
rounds=${ROUNDS:-3}
seconds=${SECONDS_PER_RUN:-2}
out=${OUT:-$build/bench/variants_results.jsonl}
python=/usr/bin/python3  # Debian's, with python3-torch
source "$root/bench/quiet.sh"
cmake --build "$build" --target bench_train -j2 >&2
ours="$build/bench/bench_train"
theirs=("$python" "$root/bench/bench_train.py")
: > "$out"

for shape in 8,128,256,8 64,32,64,4; do
  for round in $(seq "$rounds"); do
    for setting in "ours causal" "theirs causal" "ours window" "theirs window" "ours softcap" "ours sinks" "ours relbias" \
                   "ours prefix" "theirs prefix" "ours documents" "theirs documents"; do
      set -- $setting
      args=(--workload mha --shape "$shape" --seconds "$seconds" --threads 1 --label "$1-$2")
      case $2 in
        window) args+=(--window 16) ;; softcap) args+=(--softcap 30) ;; sinks) args+=(--sinks) ;;
        relbias) args+=(--rel-buckets 32) ;; prefix) args+=(--prefix-lm) ;; documents) args+=(--documents 16) ;;
      esac
      wait_for_quiet
      if [ "$1" = ours ]; then "$ours" "${args[@]}"; else OPENBLAS_NUM_THREADS=1 "${theirs[@]}" "${args[@]}"; fi |
        grep '"median_s"' >> "$out"
    done
  done
done
for S in 1024 2048 4096; do
  for window in 0 64; do
    "$ours" --workload attention --path blockwise --shape "1,8,$S,64" --window "$window" --seconds 1 --min-reps 2 \
      --label "ours-blockwise-window$window" | grep '"median_s"' >> "$out"
  done
done

"$python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
mha = [r for r in rows if r["workload"] == "mha"]
def med(label, base):
    times = [r["median_s"] for r in mha if r["label"] == label and base_of(r["shape"]) == base]
    return statistics.median(times) * 1e3 if times else float("nan")
print("| shape | attnlab causal ms | window=16 | softcap=30 | sinks | rel_buckets=32 | torch causal | torch window=16 | window / causal | softcap / causal | sinks / causal | rel bias / causal | torch window / attnlab window |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
def base_of(shape):
    for rule in (" window", " softcap", " sinks", " rel_buckets", " prefix_lm", " documents", " L="):
        shape = shape.split(rule)[0]
    return shape
for base in sorted({base_of(r["shape"]) for r in mha}):
    c, w, s = med("ours-causal", base), med("ours-window", base), med("ours-softcap", base)
    k, rb = med("ours-sinks", base), med("ours-relbias", base)
    tc, tw = med("theirs-causal", base), med("theirs-window", base)
    print(f"| {base} | {c:.3f} | {w:.3f} | {s:.3f} | {k:.3f} | {rb:.3f} | {tc:.3f} | {tw:.3f} | {w / c:.3f} | {s / c:.3f} | "
          f"{k / c:.3f} | {rb / c:.3f} | {tw / w:.3f} |")
print()
print("| shape | attnlab causal ms | prefix-LM | documents L=16 | torch causal | torch prefix-LM | torch documents | prefix-LM / causal | documents / causal | torch prefix-LM / attnlab | torch documents / attnlab |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for base in sorted({base_of(r["shape"]) for r in mha}):
    c, p, d = med("ours-causal", base), med("ours-prefix", base), med("ours-documents", base)
    tc, tp, td = med("theirs-causal", base), med("theirs-prefix", base), med("theirs-documents", base)
    print(f"| {base} | {c:.3f} | {p:.3f} | {d:.3f} | {tc:.3f} | {tp:.3f} | {td:.3f} | {p / c:.3f} | {d / c:.3f} | {tp / p:.3f} | {td / d:.3f} |")
print()
print("| attention op, blockwise, (B, H, d) = (1, 8, 64) | S | peak RSS MiB | ms fwd+bwd |")
print("|---|---|---|---|")
for r in rows:
    if r["workload"].startswith("attention"):
        print(f"| {r['label']} | {r['shape'].split('S=')[1].split()[0]} | {r['peak_rss_mib']:.0f} | {r['median_s'] * 1e3:.1f} |")
PY
