#!/usr/bin/env bash
# The real CUDA kernels (cuda/*.cu) on the CPU: builds tests/cuemu/ (the host
# emulation of the CUDA model, ASan + UBSan) in a CPU build folder and runs
#   1. the emulated suite (tests/cuda/ + tests/cuemu/test_cuemu.cpp) in both
#      thread orders, forward and reverse, as two processes at once;
#   2. CudaAllocator.* once more with the caching allocator on;
#   3. the mutants (tests/cuemu/transform.py --list-mutants), one small case
#      each in both orders, every one of which must fail.
#
#   scripts/cuemu_check.sh [BUILD_DIR]     # default build-cuemu; CI passes build
#
# BUILD_DIR is configured as a CPU build (Release) with -DATTNLAB_CUEMU=ON, or
# reconfigured with it (its other objects stay valid: nothing is rebuilt). The
# subset, chosen to keep this near 4 minutes on two cores with a built
# libattnlab: every test of tests/cuda/ except the trainer (DeviceTrainer.*),
# the 30-step
# loss curve (DeviceStep.FollowsTheCpuLossCurve) and the two long shapes
# (Shapes/*long_*): those take about 20 minutes on the emulation and are left
# to the GPU check. CUEMU_FILTER overrides the subset ('*' for everything).
# Exit status 0 only if everything passed and every mutant was caught.
# Environment: JOBS (default nproc), CUEMU_FILTER.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${1:-build-cuemu}"
jobs="${JOBS:-$(nproc)}"
filter="${CUEMU_FILTER:--DeviceTrainer.*:DeviceStep.FollowsTheCpuLossCurve:Shapes/*long_*}"
start=$SECONDS

if grep -qsx 'ATTNLAB_CUDA:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "cuemu_check: $build/ is a CUDA build; the emulation needs a CPU build folder" >&2
  exit 2
fi
if [[ -f "$build/CMakeCache.txt" ]]; then
  cmake -DATTNLAB_CUEMU=ON "$build" > /dev/null
else
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNLAB_CUEMU=ON > /dev/null
fi
echo "cuemu_check: building test_cuda_emu and the mutants in $build/ (-j$jobs)"
nice -n 5 cmake --build "$build" --target test_cuda_emu cuemu_mutants -j"$jobs"
built=$((SECONDS - start))

bin="$build/tests/cuemu"
logs="$bin/logs"
rm -rf "$logs"
mkdir -p "$logs"
# Exact-size device buffers (no caching allocator), so that ASan sees every
# buffer's bounds. Leak checking is off: the kernels allocate nothing, and
# test_cuemu.cpp counts streams and handles itself.
export ATTNLAB_NO_CUDA_CACHING=1 ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1

# "passed P, failed F, skipped S" from a gtest JSON report (absent: the process died).
counts() {
  python3 - "$1" <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("no report (the process died: see its log)")
    sys.exit()
cases = [t for s in report["testsuites"] for t in s["testsuite"]]
failed = sum(1 for t in cases if t.get("failures"))
skipped = sum(1 for t in cases if t.get("result") == "SKIPPED")
print(f"passed {len(cases) - failed - skipped}, failed {failed}, skipped {skipped}")
PY
}

status=0
echo "cuemu_check: the suite in both thread orders (filter $filter)"
suite_start=$SECONDS
for order in forward reverse; do
  CUEMU_ORDER=$order "$bin/test_cuda_emu" --gtest_filter="$filter" --gtest_output="json:$logs/suite_$order.json" \
    > "$logs/suite_$order.log" 2>&1 &
done
for order in forward reverse; do
  if ! wait -n; then status=1; fi
done
suite_time=$((SECONDS - suite_start))
for order in forward reverse; do
  echo "  $order: $(counts "$logs/suite_$order.json")"
  grep -E '^\[  FAILED  \]|ERROR: AddressSanitizer|runtime error:|\[cuemu\] [^ ]+ block \(' "$logs/suite_$order.log" | sort -u |
    sed 's/^/    /' || true
done

echo "cuemu_check: CudaAllocator.* with the caching allocator"
if ! ATTNLAB_NO_CUDA_CACHING=0 "$bin/test_cuda_emu" --gtest_filter='CudaAllocator.*' > "$logs/allocator.log" 2>&1; then
  echo "  FAILED (see $logs/allocator.log)"
  status=1
fi

echo "cuemu_check: mutants (each must fail)"
case_of() {  # the one test each mutant runs
  local agreement=Masks/CudaAttentionAgreement.ForwardAndGradientsMatchTheCpuOp
  case "$1" in
    missing_barrier) echo "$agreement/causal_square_flash" ;;            # two key tiles
    wrong_leading_dimension) echo "$agreement/no_mask_dense" ;;          # ld Tk = 70, not d_v = 12
    out_of_bounds_load) echo "$agreement/no_mask_flash" ;;               # T = 70: a partial tile
    *) echo "" ;;
  esac
}
while read -r mutant _; do
  test_case="$(case_of "$mutant")"
  if [[ -z "$test_case" ]]; then
    echo "  $mutant: no test case chosen in scripts/cuemu_check.sh"
    status=1
    continue
  fi
  # the real kernels pass this case in the suite above; the mutant must fail it
  for order in forward reverse; do
    log="$logs/mutant_${mutant}_$order.log"
    if CUEMU_ORDER=$order "$bin/test_cuda_emu_$mutant" --gtest_filter="$test_case" > "$log" 2>&1; then
      echo "  $mutant ($order): NOT caught (passed $test_case)"
      status=1
    else
      how="$(grep -m1 -oE 'AddressSanitizer: [a-z-]+|runtime error: .*|\[cuemu\] .*|elements off' "$log" || echo "failed")"
      echo "  $mutant ($order): caught: $how"
    fi
  done
done < <(python3 tests/cuemu/transform.py --list-mutants)

echo "cuemu_check: build ${built}s, suite ${suite_time}s (both orders at once), total $((SECONDS - start))s; logs in $logs"
if ((status != 0)); then
  echo "cuemu_check: FAILED" >&2
fi
exit $status
