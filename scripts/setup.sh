#!/usr/bin/env bash
# Sets up everything remat needs on a fresh Debian machine and builds it.
#   scripts/setup.sh            install packages, provide Kokkos, build into build/
#   scripts/setup.sh --cuda     the GPU build: Debian's CUDA 11.8 toolkit and g++-11
#                               (non-free), Kokkos with CUDA + OpenMP in
#                               .deps/kokkos-cuda, remat in build-cuda/
# Environment:
#   Kokkos_ROOT=/path   use this Kokkos (e.g. a 4.x with CUDA) instead of ours
#   BUILD_DIR=dir       build directory (default: build, or build-cuda)
#   BUILD_TYPE=type     CMake build type (default: Release)
#   REMAT_UNITY=N       N sources to a compilation unit (default 16; 0 compiles
#                       file by file; a smaller N recompiles less after an edit)
#   CUDA_ARCH=NAME      Kokkos architecture of the GPU build (default: AMPERE80)
#   CUDA_EXTRA_SM="90"  further GPUs to compile code for, by compute capability
#                       (default 90: H100/H200; '' for none). Ours only: a
#                       Kokkos_ROOT builds for the architecture it was built for
# Idempotent: a second run reuses the packages, the Kokkos prefix and the build.
set -euo pipefail

cuda=0
for arg in "$@"; do
  case "$arg" in
    --cuda) cuda=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
if [ "$cuda" -eq 1 ]; then build_dir="${BUILD_DIR:-$root/build-cuda}"; else build_dir="${BUILD_DIR:-$root/build}"; fi
# Every core: nproc alone obeys OMP_NUM_THREADS, which a user may have set to 1
# for the runs; the compiler is not an OpenMP program.
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
say() { printf '[setup] %s\n' "$*"; }

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# --- 1. Debian packages -------------------------------------------------------
# openblas-openmp: OpenBLAS on the same OpenMP runtime as Kokkos, so the two
# never spin two thread pools against each other on a small machine.
# Open MPI: `mpirun remat matrix` and data-parallel `mpirun remat train`
# (remat builds without it too: cmake -DREMAT_MPI=OFF).
# oneDNN (libdnnl-dev): bfloat16 GEMMs on CPUs with native bf16 (AVX512-BF16, AMX);
# Debian builds it with an OpenCL GPU runtime, so its CMake package needs the
# OpenCL headers (ocl-icd-opencl-dev, only recommended: we install none).
# chromium and python3-pil: the HTML report's test opens the page in a real
# headless browser and looks at its screenshot.
packages=(build-essential cmake ninja-build pkg-config xz-utils ca-certificates
          libhdf5-dev hdf5-tools catch2 libbenchmark-dev libcli11-dev nlohmann-json3-dev
          libopenblas-openmp-dev libdnnl-dev ocl-icd-opencl-dev libopenmpi-dev openmpi-bin
          python3 python3-numpy python3-h5py python3-torch python3-pil chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# A private apt configuration (its own source list, package lists and
# cache), so the machine's own sources and state stay untouched.
private_apt() {  # private_apt DIR "deb-line": prints the apt-get options
  local dir=$1
  mkdir -p "$dir"/apt/{lists/partial,cache/archives/partial,parts}
  echo "$2" > "$dir/apt/sources.list"
  printf '%s\n' -o "Dir::Etc::SourceList=$dir/apt/sources.list" -o "Dir::Etc::SourceParts=$dir/apt/parts" \
    -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt/cache" -o "APT::Sandbox::User=root"
}
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
debian="http://deb.debian.org/debian"
keyring="signed-by=/usr/share/keyrings/debian-archive-keyring.gpg"

# --- 2. The CUDA toolkit (--cuda) ---------------------------------------------
# Debian's nvidia-cuda-toolkit 11.8 (non-free) and g++-11, the newest host
# compiler it accepts. A machine may also have a newer CUDA (13) that Kokkos
# 3.4 cannot use; nvcc_wrapper takes the first nvcc on PATH, so Debian's
# /usr/bin goes first for every step of the GPU build.
if [ "$cuda" -eq 1 ]; then
  if ! dpkg-query -W -f='${Status}' nvidia-cuda-toolkit 2>/dev/null | grep -q 'install ok installed' ||
     ! command -v g++-11 >/dev/null; then
    say "installing Debian's CUDA toolkit and g++-11 (non-free; about 1.6 GB)"
    mapfile -t cuda_apt < <(private_apt "$deps/cuda-apt" "deb [$keyring] $debian $codename main contrib non-free")
    as_root apt-get "${cuda_apt[@]}" -qq update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get "${cuda_apt[@]}" install -y -qq --no-install-recommends \
      nvidia-cuda-toolkit g++-11 >/dev/null
    rm -rf "$deps/cuda-apt"
  fi
  export PATH="/usr/bin:$PATH"
  export NVCC_WRAPPER_DEFAULT_COMPILER=g++-11
fi

# --- 3. Kokkos ----------------------------------------------------------------
kokkos_prefix="$deps/kokkos"
[ "$cuda" -eq 1 ] && kokkos_prefix="$deps/kokkos-cuda"
kokkos_config() { ls "$1"/lib*/cmake/Kokkos/KokkosConfig.cmake 2>/dev/null | head -n 1; }

# Kokkos 3.4 names no GPU newer than Ampere, and refuses to start where its
# kernels were compiled for another major version than the device's (sm_80
# code on an H100 stops at Kokkos::initialize). nvcc 11.8 compiles for Hopper
# all the same: every compile, Kokkos' own too, adds sm_90 machine code beside
# the architecture's, and the driver picks the device's. The flags go through
# nvcc's NVCC_APPEND_FLAGS: nvcc_wrapper refuses a second architecture flag.
extra_sm=${CUDA_EXTRA_SM-90}
cuda_flags=""
if [ "$cuda" -eq 1 ]; then
  for sm in $extra_sm; do cuda_flags+=" -gencode=arch=compute_${sm},code=sm_${sm}"; done
  cuda_flags=${cuda_flags# }
fi
# What our Kokkos was built for, kept in its prefix: another request rebuilds it.
kokkos_stamp="arch=${CUDA_ARCH:-AMPERE80} extra=${cuda_flags}"
[ "$cuda" -eq 0 ] && kokkos_stamp="openmp"

build_kokkos() {
  # Debian ships Kokkos 3.4 only as a Serial build, but its trilinos source
  # package carries the full Kokkos source.
  local work="$deps/kokkos-src"
  rm -rf "$work"; mkdir -p "$work/dl"
  local apt_opts; mapfile -t apt_opts < <(private_apt "$work" "deb-src [$keyring] $debian $codename main")
  say "fetching Debian's trilinos source for Kokkos"
  apt-get "${apt_opts[@]}" -qq update
  (cd "$work/dl" && apt-get "${apt_opts[@]}" -qq source --download-only trilinos >/dev/null)
  local tarball; tarball=$(ls "$work"/dl/trilinos_*.orig.tar.* | head -n 1)
  tar -xf "$tarball" -C "$work" --wildcards '*/packages/kokkos/*'
  local src; src=$(ls -d "$work"/*/packages/kokkos | head -n 1)
  local backend=(-DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON)
  if [ "$cuda" -eq 1 ]; then
    backend+=(-DCMAKE_CXX_COMPILER="$src/bin/nvcc_wrapper" -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON
              "-DKokkos_ARCH_${CUDA_ARCH:-AMPERE80}=ON")
    say "building Kokkos with CUDA (${CUDA_ARCH:-AMPERE80}${extra_sm:+, and sm $extra_sm}) and OpenMP from $src"
  else
    say "building Kokkos with OpenMP from $src"
  fi
  # Called as a condition, where `set -e` does not hold: each step says why it failed.
  logged() {  # logged STEP command...: its output in $work/STEP.log, shown if it fails
    local step=$1; shift
    "$@" >"$work/$step.log" 2>&1 || { tail -n 30 "$work/$step.log"; say "Kokkos' $step failed ($work/$step.log)"; return 1; }
  }
  logged configure cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$kokkos_prefix" -DCMAKE_CXX_STANDARD=17 "${backend[@]}" || return 1
  logged build env NVCC_APPEND_FLAGS="$cuda_flags" cmake --build "$work/build" -j "$jobs" || return 1
  rm -rf "$kokkos_prefix"
  logged install cmake --install "$work/build" || return 1
  echo "$kokkos_stamp" >"$kokkos_prefix/remat-kokkos-build"
  rm -rf "$work"
}

if [ -n "${Kokkos_ROOT:-}" ]; then
  say "using Kokkos from Kokkos_ROOT=$Kokkos_ROOT"
  kokkos_root="$Kokkos_ROOT"
elif [ -n "$(kokkos_config "$kokkos_prefix")" ] &&
     [ "$(cat "$kokkos_prefix/remat-kokkos-build" 2>/dev/null)" = "$kokkos_stamp" ]; then
  say "reusing Kokkos in $kokkos_prefix"
  kokkos_root="$kokkos_prefix"
elif build_kokkos; then
  kokkos_root="$kokkos_prefix"
elif [ "$cuda" -eq 0 ]; then
  say "WARNING: building Kokkos with OpenMP failed; falling back to Debian's Serial Kokkos (one thread)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libtrilinos-kokkos-dev >/dev/null
  kokkos_root=/usr
else
  say "building Kokkos with CUDA failed (see above)"; exit 1
fi

# --- 4. remat -----------------------------------------------------------------
say "configuring remat in $build_dir"
mkdir -p "$build_dir"
# Most of each file's compile time is the same headers (Kokkos, CLI11, JSON,
# HDF5): compiling the sources 16 to a unit builds remat from scratch in
# under 3 minutes on 2 cores (8 to a unit: 3 minutes; file by file: 8.5),
# and an edit recompiles its unit of 16. The sources are kept unity-clean (no
# two files define the same file-local name); REMAT_UNITY=0 builds file by
# file, REMAT_UNITY=4 in smaller units for a quicker edit loop.
unity_batch=${REMAT_UNITY:-16}
[[ "$unity_batch" =~ ^[0-9]+$ ]] || { echo "setup.sh: REMAT_UNITY must be a number of sources (0: no unity build)" >&2; exit 2; }
unity=(-DCMAKE_UNITY_BUILD="$( [ "$unity_batch" = 0 ] && echo OFF || echo ON )" -DCMAKE_UNITY_BUILD_BATCH_SIZE="$unity_batch")
compiler=()
# A CUDA Kokkos compiles through its nvcc_wrapper: a user's Kokkos_ROOT's as
# it is, ours through a small script that pins Debian's nvcc and g++-11, so a
# later `cmake --build build-cuda` in any shell (a CUDA 13 first on PATH)
# still compiles with the toolkit Kokkos was built for.
if [ "$cuda" -eq 1 ]; then
  cxx="$kokkos_root/bin/nvcc_wrapper"
  if [ "$kokkos_root" = "$kokkos_prefix" ]; then
    cxx="$kokkos_prefix/bin/remat-cxx"
    printf '#!/bin/sh\n# nvcc_wrapper on Debian'"'"'s CUDA 11.8 and g++-11, whatever PATH says, with the\n# further GPUs'"'"' code (written by setup.sh)\nexport CUDA_ROOT=/usr NVCC_WRAPPER_DEFAULT_COMPILER=g++-11 PATH="/usr/bin:$PATH" NVCC_APPEND_FLAGS="%s"\nexec "%s/bin/nvcc_wrapper" "$@"\n' \
      "$cuda_flags" "$kokkos_prefix" > "$cxx"
    chmod +x "$cxx"
  fi
  # nvcc spends most of a file's time on Kokkos' headers (host and device
  # passes): 16 to a unit cuts the build from 13 to 4 minutes here.
  compiler=(-DCMAKE_CXX_COMPILER="$cxx")
  unity=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16)
fi
# CMake cannot switch the compiler of a configured build: start that one afresh.
if [ ${#compiler[@]} -gt 0 ] && [ -f "$build_dir/CMakeCache.txt" ] &&
   ! grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=${compiler[0]#-DCMAKE_CXX_COMPILER=}" "$build_dir/CMakeCache.txt"; then
  rm -rf "$build_dir/CMakeCache.txt" "$build_dir/CMakeFiles"
fi
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DKokkos_ROOT="$kokkos_root" "${compiler[@]}" "${unity[@]}" >"$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log"; exit 1; }
# nvcc's added flags (NVCC_APPEND_FLAGS, in remat-cxx) are invisible to the
# build's dependency tracking, and installed Kokkos headers keep their old
# times: a build made for other GPUs starts afresh, or objects without the
# new GPUs' code stay and their kernels are missing on those GPUs.
if [ "$cuda" -eq 1 ]; then
  applied=""; [ "$kokkos_root" = "$kokkos_prefix" ] && applied="$kokkos_stamp"
  if [ "$(cat "$build_dir/remat-gpu-code" 2>/dev/null)" != "$applied" ]; then
    cmake --build "$build_dir" --target clean >/dev/null 2>&1 || true
    echo "$applied" >"$build_dir/remat-gpu-code"
  fi
fi
say "building remat ($jobs jobs)"
cmake --build "$build_dir" -j "$jobs"
say "done: $build_dir/remat --help"
