#!/usr/bin/env bash
# Builds the GPU bundle: one archive to copy to a machine with an NVIDIA GPU
# (no package registry needed there) and run.
#   scripts/gpu-bundle.sh [OUT_DIR]     (default: dist/)
# Makes OUT_DIR/remat-gpu.tar.xz holding
#   bin/remat, bin/remat_tests   the CUDA build (scripts/setup.sh --cuda)
#   bin/remat-host               a portable host build (no -march=native), for
#                                the host's gradients to compare the device's with
#   lib/                         the shared libraries they need that a bare
#                                CUDA machine lacks (HDF5, OpenBLAS, Open MPI,
#                                the CUDA 11.8 runtime they were built with,
#                                ...); not the C library, not the CUDA driver,
#                                not cuBLAS (the machine's own is loaded at run
#                                time, by soname)
#   run.sh                       the checks; see its header
# Unpack and run there:  tar -xJf remat-gpu.tar.xz && remat-gpu/run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)
say() { printf '[gpu-bundle] %s\n' "$*"; }

# The CUDA build; and a host build for any x86-64 CPU, which makes the
# reference gradients on the GPU machine (golden files of every model's
# `small` weights would be hundreds of MB).
[ -x "$root/build-cuda/remat" ] && [ -x "$root/build-cuda/tests/remat_tests" ] || "$root/scripts/setup.sh" --cuda
cmake --build "$root/build-cuda" --target remat remat_tests >/dev/null
# Every unit must carry code for every GPU the build is for: an object left
# from a build without one has kernels that GPU cannot start (a crash at
# their first launch, not an error).
for b in remat tests/remat_tests; do
  counts=$(cuobjdump --list-elf "$root/build-cuda/$b" | sed -n 's/.*\.\(sm_[0-9]*\)\.cubin$/\1/p' | sort | uniq -c)
  if [ "$(echo "$counts" | awk '{print $1}' | sort -u | wc -l)" -ne 1 ]; then
    say "build-cuda/$b lacks some GPUs' code in some units (cubins per GPU below): rerun scripts/setup.sh --cuda"
    echo "$counts"; exit 1
  fi
done
host_build="$root/build-bundle-host"
say "portable host build in $host_build"
mkdir -p "$host_build"
cmake -S "$root" -B "$host_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DREMAT_NATIVE=OFF -DREMAT_BUILD_TESTS=OFF \
  -DREMAT_BUILD_BENCH=OFF -DKokkos_ROOT="${Kokkos_ROOT:-$root/.deps/kokkos}" >"$host_build/configure.log" 2>&1 ||
  { cat "$host_build/configure.log"; exit 1; }
cmake --build "$host_build" --target remat -j "$(nproc)" >/dev/null

stage="$out/remat-gpu"
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
cp "$root/build-cuda/remat" "$root/build-cuda/tests/remat_tests" "$stage/bin/"
cp "$host_build/remat" "$stage/bin/remat-host"

# Every library the binaries load, except the C library's own and the CUDA
# driver, which belong to the machine.
say "collecting shared libraries"
ldd "$stage"/bin/* | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libcuda.so.*|libresolv.so.*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done

cat > "$stage/run.sh" <<'RUN'
#!/bin/sh
# remat's GPU checks, on a machine with an NVIDIA GPU:
#  1. every model's `small` check with every strategy: the device's
#     gradients against the host build's (same weights and batch, within
#     1e-4 relative), checkpoint strategies bitwise equal to `full` on the
#     device;
#  2. the unit suite (Catch2) on the device;
#  3. the strategy matrix on gpu-medium for gpt2 and llama into
#     $OUT/results.h5 (OUT defaults to ./out; a rerun finishes what is
#     missing), and its table.
# Every step runs; the exit status is 1 if any failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Kernels load when first launched, not all at start-up.
export CUDA_MODULE_LOADING=LAZY
# cuBLAS is the machine's: the usual CUDA library folders, after ours.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
  [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
status=0
step() { printf '\n=== %s ===\n' "$*"; }
run() { "$@" || { echo "FAILED ($?): $*"; status=1; }; }
step "versions"
run "$here/bin/remat" --version
nvidia-smi -L 2>/dev/null
step "checks: device against host gradients, strategies against full"
for m in gpt2 llama bert revformer parallel mixtral encdec; do
  run "$here/bin/remat-host" check --model "$m" --preset small --strategies full --save-golden "$out/host-$m.h5" \
    --force >/dev/null
  run "$here/bin/remat" check --golden "$out/host-$m.h5" --strategies all
done
step "unit suite on the device"
run "$here/bin/remat_tests" "~[design]"
step "strategy matrix, gpu-medium"
run "$here/bin/remat" matrix --preset gpu-medium --models gpt2,llama --strategies all --out "$out/results.h5" --resume
exit $status
RUN
chmod +x "$stage/run.sh"

say "packing"
tar -C "$out" -cJf "$out/remat-gpu.tar.xz" remat-gpu
size=$(stat -c %s "$out/remat-gpu.tar.xz")
say "$out/remat-gpu.tar.xz: $((size / 1048576)) MiB"
if [ "$size" -gt $((60 * 1048576)) ]; then
  say "the bundle is over 60 MiB"; exit 1
fi
