#!/usr/bin/env bash
# Sets up everything remat needs on a fresh Debian machine and builds it.
#   scripts/setup.sh            install packages, provide Kokkos, build into build/
# Environment:
#   Kokkos_ROOT=/path   use this Kokkos (e.g. a 4.x with CUDA) instead of ours
#   BUILD_DIR=dir       build directory (default: build)
#   BUILD_TYPE=type     CMake build type (default: Release)
# Idempotent: a second run reuses the packages, the Kokkos prefix and the build.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
build_dir="${BUILD_DIR:-$root/build}"
jobs=$(nproc)
say() { printf '[setup] %s\n' "$*"; }

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# --- 1. Debian packages -------------------------------------------------------
# openblas-openmp: OpenBLAS on the same OpenMP runtime as Kokkos, so the two
# never spin two thread pools against each other on a small machine.
# Open MPI: `mpirun remat matrix` and data-parallel `mpirun remat train`
# (remat builds without it too: cmake -DREMAT_MPI=OFF).
packages=(build-essential cmake ninja-build pkg-config xz-utils ca-certificates
          libhdf5-dev hdf5-tools catch2 libbenchmark-dev libcli11-dev
          libopenblas-openmp-dev libopenmpi-dev openmpi-bin
          python3 python3-numpy python3-h5py python3-torch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- 2. Kokkos ----------------------------------------------------------------
kokkos_prefix="$deps/kokkos"
kokkos_config() { ls "$1"/lib*/cmake/Kokkos/KokkosConfig.cmake 2>/dev/null | head -n 1; }

build_kokkos_openmp() {
  # Debian ships Kokkos 3.4 only as a Serial build, but its trilinos source
  # package carries the full Kokkos source. Fetch it through a private apt
  # configuration so the machine's own sources and state stay untouched.
  local work="$deps/kokkos-src" codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  rm -rf "$work"; mkdir -p "$work"/apt/{lists/partial,cache/archives/partial,parts} "$work/dl"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $codename main" \
    > "$work/apt/sources.list"
  local apt_opts=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=$work/apt/parts"
                  -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
                  -o "APT::Sandbox::User=root")
  say "fetching Debian's trilinos source for Kokkos"
  apt-get "${apt_opts[@]}" -qq update
  (cd "$work/dl" && apt-get "${apt_opts[@]}" -qq source --download-only trilinos >/dev/null)
  local tarball; tarball=$(ls "$work"/dl/trilinos_*.orig.tar.* | head -n 1)
  tar -xf "$tarball" -C "$work" --wildcards '*/packages/kokkos/*'
  local src; src=$(ls -d "$work"/*/packages/kokkos | head -n 1)
  say "building Kokkos with OpenMP from $src"
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$kokkos_prefix" -DCMAKE_CXX_STANDARD=17 \
    -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON >"$work/configure.log"
  cmake --build "$work/build" -j "$jobs" >"$work/build.log"
  cmake --install "$work/build" >"$work/install.log"
  rm -rf "$work"
}

if [ -n "${Kokkos_ROOT:-}" ]; then
  say "using Kokkos from Kokkos_ROOT=$Kokkos_ROOT"
  kokkos_root="$Kokkos_ROOT"
elif [ -n "$(kokkos_config "$kokkos_prefix")" ]; then
  say "reusing Kokkos in $kokkos_prefix"
  kokkos_root="$kokkos_prefix"
elif build_kokkos_openmp; then
  kokkos_root="$kokkos_prefix"
else
  say "WARNING: building Kokkos with OpenMP failed; falling back to Debian's Serial Kokkos (one thread)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libtrilinos-kokkos-dev >/dev/null
  kokkos_root=/usr
fi

# --- 3. remat -----------------------------------------------------------------
say "configuring remat in $build_dir"
mkdir -p "$build_dir"
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DKokkos_ROOT="$kokkos_root" >"$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log"; exit 1; }
say "building remat ($jobs jobs)"
cmake --build "$build_dir" -j "$jobs"
say "done: $build_dir/remat --help"
