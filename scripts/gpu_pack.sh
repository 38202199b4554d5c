#!/usr/bin/env bash
# Packs what a GPU machine needs to check the CUDA backend into .gpu/ (git-ignored):
#
#   scripts/gpu_pack.sh        # then, on the GPU machine: .gpu/gpu_check.sh OUTDIR
#
# Builds build-cuda/ (sm_90; configured as scripts/setup.sh --cuda does, if it is
# not yet) for the targets test_cuda, bench_attention_gpu, bench_train and
# attnlab, and puts into .gpu/: bin/ (the four binaries), libs.tar.xz (every shared library `ldd`
# lists for them except glibc's own and the CUDA driver, runtime and cuBLAS,
# which the GPU machine's CUDA 13 install provides: cuBLAS alone is 600 MB),
# gpu_check.sh, bench_sdpa.py, gpu_table.py, bench_train.py and train_gpu_table.py. Fails if .gpu/ exceeds 64 MiB.
# Environment: JOBS (default 2), NVCC (default /usr/local/cuda/bin/nvcc).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build=build-cuda
jobs=${JOBS:-2}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
limit=$((64 * 1024 * 1024))

if ! grep -qsx 'ATTNLAB_CUDA:BOOL=ON' "$build/CMakeCache.txt"; then
  [[ -x "$nvcc" ]] || { echo "gpu_pack.sh: nvcc not found at $nvcc (set NVCC)" >&2; exit 1; }
  echo "gpu_pack.sh: configuring $build/ (CUDA, sm_90)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DATTNLAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$nvcc"
fi
echo "gpu_pack.sh: building test_cuda, bench_attention_gpu, attnlab in $build/ (-j$jobs)"
nice -n 10 cmake --build "$build" --target test_cuda bench_attention_gpu bench_train attnlab_cli -j"$jobs"

binaries=("$build/tests/cuda/test_cuda" "$build/bench/gpu/bench_attention_gpu" "$build/bench/bench_train" "$build/attnlab")
rm -rf .gpu
mkdir -p .gpu/bin
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
cp "${binaries[@]}" .gpu/bin/

# "name => /path (address)" lines; glibc's libraries and the CUDA ones stay behind.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so)'
for binary in "${binaries[@]}"; do
  if ldd "$binary" | grep -q 'not found'; then
    echo "gpu_pack.sh: $binary has unresolved libraries:" >&2
    ldd "$binary" | grep 'not found' >&2
    exit 1
  fi
  ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  cp -L "$path" "$staging/$name"
done
tar -C "$staging" -cJf .gpu/libs.tar.xz .
cp scripts/gpu_check.sh bench/gpu/bench_sdpa.py bench/gpu/gpu_table.py bench/bench_train.py bench/gpu/train_gpu_table.py .gpu/

size=$(du -sb .gpu | cut -f1)
echo "gpu_pack.sh: .gpu/ holds $(ls "$staging" | wc -l) libraries ($(du -sh "$staging" | cut -f1) unpacked):"
ls "$staging" | tr '\n' ' '
echo
ls -la .gpu .gpu/bin
echo "gpu_pack.sh: .gpu/ is $((size / 1024 / 1024)) MiB ($size bytes; limit 64 MiB)"
if ((size > limit)); then
  echo "gpu_pack.sh: .gpu/ exceeds 64 MiB" >&2
  exit 1
fi
