#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ into build-fuzz/ (clang++-14,
# -fsanitize=fuzzer,address,undefined) and runs each for SECONDS.
#
#   scripts/fuzz.sh SECONDS [TARGET ...]   # default: every target, one after another
#   FUZZ_PARALLEL=2 scripts/fuzz.sh 600    # two targets at a time
#
# Targets: fuzz_config fuzz_sweep fuzz_checkpoint fuzz_token_file fuzz_text
# fuzz_safetensors (a safetensors file's bytes, read and written back)
# fuzz_runs_file (a runs file of `train --runs`, read and written back)
# fuzz_tokenizer (tokenizer.json, or vocab.json + merges.txt) fuzz_import (a
# config.json as `attnlab import` reads it). Inputs stay under 4 KiB
# (libFuzzer's -max_len for small seeds); in fuzz_safetensors' JSON form,
# fuzz_tokenizer and fuzz_import, 0x01 and a count byte n repeat the byte before
# them n * 4096 times (up to 4 MiB in all), so JSON nested a million deep and
# values of megabytes are reachable (tests/fuzz/README.md). The two
# HDF5 targets take recipes (tests/fuzz/hdf5_recipe.h: edits that build a
# well-formed file); FUZZ_RAW=1 adds raw HDF5 files as seeds
# (tests/fuzz/corpus/<target>_files/), whose mutations mostly reach libhdf5's
# own parser, where HDF5 1.10.8 has crashes of its own: the loaders read such a
# file in a forked child first (data/h5_probe.h), so those must come back as
# attnlab::Error, and the run counts them (tests/fuzz/README.md).
# FUZZ_RAW=only feeds the HDF5 targets raw files alone (no recipe seeds; its
# working corpus is build-fuzz/corpus/<target>_raw/): the probe's stress test.
# Each starts from its committed seeds (tests/fuzz/corpus/<target>/, never written) and a
# working corpus in build-fuzz/corpus/<target>/ that grows between runs; a
# finding is saved as build-fuzz/findings/<target>/crash-* (or timeout-*,
# oom-*), ready to copy into tests/fuzz/corpus/<target>/. Replay one with
# build-fuzz/<target> FILE. Installs nothing: needs Debian's clang-14 and
# libclang-rt-14-dev (libFuzzer), plus the main build's -dev packages.
# Exit status: 0 if no target found anything, 1 if one did, 2 on bad usage or
# a missing tool.
set -euo pipefail

all_targets=(fuzz_config fuzz_sweep fuzz_checkpoint fuzz_token_file fuzz_text fuzz_safetensors fuzz_runs_file fuzz_tokenizer fuzz_import)
usage() { echo "usage: $0 SECONDS [TARGET ...]   (targets: ${all_targets[*]})" >&2; }

if (($# < 1)) || ! [[ "$1" =~ ^[0-9]+$ ]] || (($1 < 1)); then usage; exit 2; fi
seconds="$1"
shift
targets=("$@")
((${#targets[@]})) || targets=("${all_targets[@]}")
for target in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $target "* ]] || { echo "fuzz.sh: unknown target '$target'" >&2; usage; exit 2; }
done
parallel="${FUZZ_PARALLEL:-1}"
[[ "$parallel" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: FUZZ_PARALLEL must be a positive integer, got '$parallel'" >&2; exit 2; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build=build-fuzz

command -v clang++-14 >/dev/null || { echo "fuzz.sh: clang++-14 not found (Debian package clang-14)" >&2; exit 2; }
probe_dir="$(mktemp -d)"
trap 'rm -rf "$probe_dir"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe_dir/probe.cpp"
clang++-14 -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cpp" -o "$probe_dir/probe" 2>/dev/null ||
  { echo "fuzz.sh: clang++-14 cannot link -fsanitize=fuzzer,address,undefined (Debian package libclang-rt-14-dev)" >&2; exit 2; }

echo "fuzz.sh: building ${targets[*]} in $build/"
mkdir -p "$build"
cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; echo "fuzz.sh: configuring $build/ failed" >&2; exit 2; }
cmake --build "$build" --target "${targets[@]}" -- -j"$(nproc)"

export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# A fuzzed checkpoint may leave the library's own allocations at exit; leaks of
# ours would show as HDF5 objects left open, which the targets check.
# A huge request returns NULL as malloc does outside the sanitizer (libhdf5
# then reports an error) rather than counting as a finding.
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:${ASAN_OPTIONS:-}"
# An HDF5 image is read in a child process first, which is killed at this
# limit: a hang inside libhdf5 costs 2 s of the run, not 10.
export ATTNLAB_H5_PROBE_SECONDS="${ATTNLAB_H5_PROBE_SECONDS:-2}"

# Runs one target for `seconds`; its log is $build/logs/<target>.log.
run_target() {
  local target="$1" corpus="$build/corpus/$1" findings="$build/findings/$1/" log="$build/logs/$1.log"
  local seeds=("tests/fuzz/corpus/$target")
  if [[ "${FUZZ_RAW:-}" == only && -d "tests/fuzz/corpus/${target}_files" ]]; then seeds=() corpus="${corpus}_raw"; fi
  mkdir -p "$corpus" "$findings" "$build/logs"
  if [[ -n "${FUZZ_RAW:-}" && -d "tests/fuzz/corpus/${target}_files" ]]; then seeds+=("tests/fuzz/corpus/${target}_files"); fi
  # The kept libhdf5 crashes open every run of an HDF5 target: each must come
  # back from the probe as an attnlab::Error (the hang costs its 2 s).
  if [[ -d "tests/fuzz/corpus/${target}_files" ]]; then seeds+=("tests/fuzz/libhdf5_crashes"); fi
  local status=0
  # The probe's child may map up to 4 GiB before its own limit stops it;
  # libFuzzer's malloc hook, still installed there, would save an input that
  # allocates 2 GiB in the child as an oom finding (the default malloc limit
  # is -rss_limit_mb). This process's memory stays bounded by -rss_limit_mb.
  "$build/$target" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=8192 \
    -print_final_stats=1 -artifact_prefix="$findings" "$corpus" "${seeds[@]}" >"$log" 2>&1 || status=$?
  local runs probe
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  probe="$(sed -n 's/^fuzz: probe: /; probe: /p' "$log" | tail -1)"
  if ((status == 0)); then
    echo "fuzz.sh: $target: ${runs:-?} executions in ${seconds} s, nothing found${probe}"
  else
    echo "fuzz.sh: $target: FOUND a problem after ${runs:-?} executions (exit $status): $(ls "$findings" | head -3 | tr '\n' ' ')(see $log)"
  fi
  return "$status"
}

failed=0
pids=()
for target in "${targets[@]}"; do
  run_target "$target" &
  pids+=($!)
  if ((${#pids[@]} >= parallel)); then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
exit "$failed"
