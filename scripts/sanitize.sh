#!/usr/bin/env bash
# Builds remat with AddressSanitizer and UndefinedBehaviorSanitizer into
# build-sanitize/ (after scripts/setup.sh has provided the packages and
# Kokkos) and runs under them: the whole unit suite in one process, the CLI
# checks and the file fuzzer. Any memory error or undefined behaviour fails.
#   scripts/sanitize.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${SANITIZE_BUILD_DIR:-$root/build-sanitize}"
kokkos_root="${Kokkos_ROOT:-$root/.deps/kokkos}"
say() { printf '[sanitize] %s\n' "$*"; }

mkdir -p "$build"
say "configuring $build"
# -O1 and line tables only: a third of an optimised build's compile time, and
# reports still name the file and line. Sources 16 to a unit, as the CUDA
# build does: most of each file's time is Kokkos' headers.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -g1" \
  -DREMAT_SANITIZE=ON -DREMAT_BUILD_BENCH=OFF -DREMAT_NATIVE=OFF -DKokkos_ROOT="$kokkos_root" \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
say "building (about 5 minutes on 2 cores)"
cmake --build "$build" -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --target remat remat_tests >"$build/build.log" 2>&1 || { tail -50 "$build/build.log"; exit 1; }

# Leaks are not judged: the HDF5 and OpenMP runtimes keep allocations to
# process exit by design. Everything else stops the process with a report.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PYTHON=/usr/bin/python3
# Every quick unit case, in one process and in a random order: seed 2,
# another order than ctest's unit.shuffled (seed 1), so that CI runs the
# suite in two orders. The [slow] cases (real sizes, sweeps over depths and
# lengths, long trainings) and the planner's exhaustive enumeration run the
# quick cases' code at larger sizes or more times: minutes each under the
# sanitizers, for no path the quick cases leave out. They run in ctest. The
# one slow case with code of its own, docs/adding-a-strategy.md's example,
# runs here too.
# Two lanes at once: the unit suite on two threads (so that the threaded
# paths run sanitized too), then a third of the fuzzer's cases; the CLI
# checks (on one thread, but for their few runs on two against one), then
# the rest of the cases. The three one after
# another took 6 minutes on 2 cores, the lanes take 4: the CLI's many short
# processes and the fuzzer's leave a second core mostly idle. The unit
# suite's idle threads sleep (OMP_WAIT_POLICY=passive): spinning, they took
# the other lane's core and its run took 5.5 minutes instead of 3.5. Each
# lane's output is shown when it ends; either failing fails the run.
export OMP_NUM_THREADS=1
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
lane() {  # lane NAME command...: runs it, its output in $logs/NAME, its verdict in $logs/NAME.rc
  local name=$1; shift
  local rc=0 start=$SECONDS
  "$@" >"$logs/$name" 2>&1 || rc=$?
  echo "$rc" >"$logs/$name.rc"
  echo "$((SECONDS - start))" >"$logs/$name.s"
}
fuzz() { /usr/bin/python3 "$root/tests/fuzz/fuzz_files.py" "$build/remat" --cases "$1" --seed "$2" --timeout 120; }
say "unit suite and CLI checks, then the file fuzzer's 320 cases (two lanes)"
(OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive lane unit "$build/tests/remat_tests" --order rand --rng-seed 2 "~[slow]~[exhaustive],[docs]"
 lane fuzz-1 fuzz 110 1) &
lane cli "$root/tests/cli/cli_test.sh" "$build/remat"
lane fuzz-2 fuzz 210 2
wait
failed=0
for name in unit fuzz-1 cli fuzz-2; do
  say "$name: $( [ "$(cat "$logs/$name.rc" 2>/dev/null)" = 0 ] && echo passed || echo FAILED) ($(cat "$logs/$name.s" 2>/dev/null) s)"
  if [ "$(cat "$logs/$name.rc" 2>/dev/null)" != 0 ]; then failed=1; tail -n 60 "$logs/$name" 2>/dev/null; fi
done
[ "$failed" -eq 0 ] || exit 1
tail -q -n 1 "$logs/unit" "$logs/cli" "$logs/fuzz-1" "$logs/fuzz-2"
say "all passed under AddressSanitizer and UndefinedBehaviorSanitizer"
