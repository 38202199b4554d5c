#!/usr/bin/env bash
# Installs attnlab's build dependencies (Debian 12, as root) and builds it.
#
#   scripts/setup.sh          # CPU build in build/
#   scripts/setup.sh --cuda   # also a CUDA build in build-cuda/, when nvcc is found
#
# Safe to rerun: apt is skipped when every package is already installed, and
# CMake/ninja/ccache only rebuild what changed. Works from any directory.
set -euo pipefail

usage() { echo "usage: $0 [--cuda]" >&2; }

want_cuda=0
for arg in "$@"; do
  case "$arg" in
    --cuda) want_cuda=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg'" >&2; usage; exit 2 ;;
  esac
done

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libxtensor-dev libxtensor-blas-dev xtl-dev libopenblas-dev libxsmm-dev libhdf5-dev
  libcxxopts-dev libtomlplusplus-dev libgtest-dev googletest
  libprotobuf-dev protobuf-compiler libboost-dev
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  libopenmpi-dev openmpi-bin
  clang-14 libclang-rt-14-dev
  python3 python3-torch python3-h5py python3-numpy python3-matplotlib
  python3-dev pybind11-dev python3-pybind11 python3-pytest jupyter-nbconvert python3-ipykernel
  python3-plotly chromium python3-websocket fonts-dejavu-core
)

# Packages not yet in state "install ok installed".
missing=()
for pkg in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if ((${#missing[@]})); then
  echo "setup.sh: installing ${missing[*]}"
  if [[ $EUID -ne 0 ]]; then
    echo "setup.sh: installing packages needs root (run as root, or install them yourself)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${packages[@]}"
else
  echo "setup.sh: all ${#packages[@]} packages already installed"
fi

# ccache (its default CCACHE_DIR, ~/.cache/ccache, unless set) keeps rebuilds
# fast; the top-level CMakeLists.txt uses it as the compiler launcher when found.
jobs="$(nproc)"

echo "setup.sh: configuring and building build/ (Release, -j$jobs)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"

if ((want_cuda)); then
  nvcc_path=""
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    nvcc_path=/usr/local/cuda/bin/nvcc
  elif command -v nvcc >/dev/null 2>&1; then
    nvcc_path="$(command -v nvcc)"
  fi
  if [[ -z "$nvcc_path" ]]; then
    echo "setup.sh: skipped the CUDA build: nvcc not found at /usr/local/cuda/bin/nvcc or on PATH"
  else
    # Pitfall: handing CMake a different CMAKE_CUDA_COMPILER than the cached one
    # makes it delete its cache and re-run WITHOUT our -D options, so build-cuda/
    # silently turns into a CPU (stub) build that passes every test. Start afresh
    # instead, and check the result below.
    cache=build-cuda/CMakeCache.txt
    if [[ -f "$cache" ]]; then
      cached_nvcc="$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$cache")"
      if [[ "$cached_nvcc" != "$nvcc_path" ]]; then
        echo "setup.sh: build-cuda/ was configured with '${cached_nvcc}'; reconfiguring it from scratch"
        rm -rf build-cuda
      fi
    fi
    echo "setup.sh: configuring and building build-cuda/ with $nvcc_path (sm_90, -j$jobs)"
    cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DATTNLAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$nvcc_path"
    if ! grep -qx 'ATTNLAB_CUDA:BOOL=ON' "$cache"; then
      echo "setup.sh: build-cuda/ is not configured with ATTNLAB_CUDA=ON; remove it and rerun" >&2
      exit 1
    fi
    cmake --build build-cuda -j"$jobs"
  fi
fi
