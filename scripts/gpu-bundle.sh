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
# Kokkos_ROOT is the CUDA build's Kokkos, as for setup.sh --cuda (default: ours,
# in .deps/kokkos-cuda); HOST_Kokkos_ROOT the host build's (default: .deps/kokkos,
# which scripts/setup.sh makes). Never one for the other: a host Kokkos given
# to the CUDA build compiles it with that Kokkos' nvcc_wrapper for no GPU we run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)
say() { printf '[gpu-bundle] %s\n' "$*"; }

# The CUDA build; and a host build for any x86-64 CPU, which makes the
# reference gradients on the GPU machine (golden files of every model's
# `small` weights would be hundreds of MB).
# Always through setup.sh: it rebuilds Kokkos and build-cuda when they were
# made for other GPUs than asked for now (CUDA_EXTRA_SM, default Hopper's 90),
# and only builds what changed otherwise.
"$root/scripts/setup.sh" --cuda
# Every unit must carry code for every GPU the build is for: an object left
# from a build without one has kernels that GPU cannot start (a crash at
# their first launch, not an error). And the GPUs asked for must be there:
# a build for Ampere alone stops at Kokkos::initialize on an H100 or H200.
for b in remat tests/remat_tests; do
  counts=$(cuobjdump --list-elf "$root/build-cuda/$b" | sed -n 's/.*\.\(sm_[0-9]*\)\.cubin$/\1/p' | sort | uniq -c)
  if [ "$(echo "$counts" | awk '{print $1}' | sort -u | wc -l)" -ne 1 ]; then
    say "build-cuda/$b lacks some GPUs' code in some units (cubins per GPU below): rerun scripts/setup.sh --cuda"
    echo "$counts"; exit 1
  fi
  for sm in ${CUDA_EXTRA_SM-90}; do
    echo "$counts" | grep -qw "sm_$sm" ||
      { say "build-cuda/$b has no code for sm_$sm (it has: $(echo $counts)): rerun scripts/setup.sh --cuda"; exit 1; }
  done
done
say "GPU code in the bundle: $(echo "$counts" | awk '{print $2}' | tr '\n' ' ')"
host_build="$root/build-bundle-host"
host_kokkos="${HOST_Kokkos_ROOT:-$root/.deps/kokkos}"
[ -d "$host_kokkos" ] || { say "no host Kokkos in $host_kokkos: run scripts/setup.sh, or set HOST_Kokkos_ROOT"; exit 1; }
say "portable host build in $host_build"
mkdir -p "$host_build"
cmake -S "$root" -B "$host_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DREMAT_NATIVE=OFF -DREMAT_BUILD_TESTS=OFF \
  -DREMAT_BUILD_BENCH=OFF -DKokkos_ROOT="$host_kokkos" >"$host_build/configure.log" 2>&1 ||
  { cat "$host_build/configure.log"; exit 1; }
cmake --build "$host_build" --target remat -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" >/dev/null

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

# The kernel timer (a Kokkos tool: bench/kernel_timer.cpp) for run.sh's profile,
# and the PyTorch comparison (bench/side_by_side.py --device cuda).
g++ -O2 -shared -fPIC "$root/bench/kernel_timer.cpp" -o "$stage/lib/libremat_kernel_timer.so"
cp "$root/bench/side_by_side.py" "$stage/"

cat > "$stage/run.sh" <<'RUN'
#!/bin/sh
# remat's GPU checks, on a machine with an NVIDIA GPU:
#  1. every model's `small` check with every strategy: the device's
#     gradients against the host build's (same weights and batch, within
#     1e-4 relative), checkpoint strategies bitwise equal to `full` on the
#     device;
#  2. gpt2 on gpu-medium: a step's time and memory, then where a step's time
#     goes (two blocks, every kernel and GEMM timed by the kernel timer);
#  3. the unit suite's quick cases on the device, a run per test file (a
#     crash loses one file's cases, not the rest), logs in $OUT/suite-*.log;
#  4. gpt2 on gpu-medium beside PyTorch on the same GPU (side_by_side.py
#     --device cuda), where python3 has torch with CUDA;
#  5. the strategy matrix on gpu-medium for gpt2 and llama into
#     $OUT/results.h5 (OUT defaults to ./out; a rerun finishes what is
#     missing), and its table.
# Each part has a time limit in seconds, from the environment: CHECK_S (each
# command of part 1, default 60), TIME_S (part 2, 120), SUITE_S (part 3 in
# all, 150), TORCH_S (part 4, 120), MATRIX_S (part 5, 150); the defaults fit
# about 12 minutes.
# Every part runs; the exit status is 1 if any failed.
set -uf  # -f: test tags such as [#test_gemm] are no file patterns
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
step() { printf '\n=== %s === (%s)\n' "$*" "$(date +%T)"; }
# run LIMIT COMMAND...: the command under a time limit; says how long it took and how it failed.
run() {
  limit=$1; shift
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@"
  rc=$?
  took=$(( $(date +%s) - t0 ))
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "TIMED OUT after ${limit} s: $*"; status=1
  elif [ $rc -ne 0 ]; then echo "FAILED ($rc) after ${took} s: $*"; status=1
  else echo "(${took} s)"; fi
}
step "versions"
run 30 "$here/bin/remat" --version
nvidia-smi -L 2>/dev/null
# One command that starts the GPU (Kokkos::initialize, cuBLAS): where it
# fails, every part would fail the same way, and device time is scarce.
if ! "$here/bin/remat" models >/dev/null; then
  echo "STOPPED: this CUDA build does not start on this GPU (above); nothing else can run"
  exit 1
fi

step "checks: device against host gradients, strategies against full"
for m in gpt2 llama bert revformer parallel mixtral encdec; do
  run "${CHECK_S:-60}" "$here/bin/remat-host" check --model "$m" --preset small --strategies full \
    --save-golden "$out/host-$m.h5" --force >/dev/null
  run "${CHECK_S:-60}" "$here/bin/remat" check --golden "$out/host-$m.h5" --strategies all
done

step "gpt2 gpu-medium: a step's time and memory"
run "${TIME_S:-120}" "$here/bin/remat" time --model gpt2 --preset gpu-medium --strategy full --steps 2
step "gpt2 gpu-medium, 2 blocks: where a step's time goes (every kernel fenced: slower than above)"
# (Modules loaded at start-up, so that no kernel's first call carries its module's loading.)
run "${TIME_S:-120}" env CUDA_LAUNCH_BLOCKING=1 CUDA_MODULE_LOADING=EAGER \
  KOKKOS_PROFILE_LIBRARY="$here/lib/libremat_kernel_timer.so" \
  "$here/bin/remat" time --model gpt2 --preset gpu-medium --layers 2 --strategy full --steps 1

step "unit suite on the device, a run per test file"
files=$("$here/bin/remat_tests" -# --list-tags 2>/dev/null | grep -o '\[#[^]]*\]' | sort -u)
deadline=$(( $(date +%s) + ${SUITE_S:-150} ))
for f in $files; do
  left=$(( deadline - $(date +%s) ))
  if [ $left -le 5 ]; then echo "NOT RUN (time): $f"; status=1; continue; fi
  log="$out/suite-$(echo "$f" | tr -d '[]#').log"
  # (not [design] and [schema]: they read the source tree's files)
  run "$left" "$here/bin/remat_tests" -# "$f~[design]~[schema]~[slow]~[exhaustive]" >"$log" 2>&1
  printf -- '--- %s: %s\n' "$f" "$(tail -n 3 "$log" | tr '\n' ' ')"
  grep -q "FAILED" "$log" && grep -m 8 -A 14 "FAILED:" "$log"
done

step "gpt2 gpu-medium beside PyTorch on this GPU"
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  run "${TORCH_S:-120}" python3 "$here/side_by_side.py" --device cuda --remat "$here/bin/remat" --preset gpu-medium \
    --models gpt2 --strategies full,per-layer,selective:attn-core --steps 3 --out "$out/side_by_side.md"
else
  echo "skipped: this machine's python3 has no torch with CUDA"
fi

step "strategy matrix, gpu-medium"
run "${MATRIX_S:-150}" "$here/bin/remat" matrix --preset gpu-medium --models gpt2,llama --strategies all \
  --out "$out/results.h5" --resume
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
