#!/usr/bin/env bash
# A matrix killed (kill -9) mid-run keeps every finished shape's runs (a
# shape's strategies are timed side by side, so they finish together), and
# --resume completes it without repeating them.
#   interrupt_test.sh path/to/remat
set -uo pipefail
remat=$1
work=$(mktemp -d)
trap 'kill -9 $pid 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
args=(matrix --models gpt2 --preset deep --layers 2,6 --seq 128 --strategies full,per-layer,sqrt,offload --steps 6
      --warmup 1 --out r.h5)
runs() { "$remat" report r.h5 2>/dev/null | grep -c '^| .* | L[0-9]* S[0-9]* B[0-9]* |' || true; }

"$remat" "${args[@]}" >first.txt 2>&1 &
pid=$!
for _ in $(seq 600); do  # up to 60 s for the first shape's four runs to finish
  [ "$(runs)" -ge 4 ] && break
  sleep 0.1
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
done_before=$(runs)
echo "killed after $done_before finished runs"
[ "$done_before" -ge 4 ] || { echo "FAIL: the finished shape's runs did not survive"; exit 1; }
[ "$done_before" -lt 8 ] || { echo "FAIL: the matrix finished before it could be interrupted"; exit 1; }
[ "$done_before" -eq 4 ] || { echo "FAIL: $done_before runs recorded: a shape's runs are recorded together"; exit 1; }
ls r.h5.partial.* >/dev/null 2>&1 && echo "(a temporary was left behind; the next append removes it)"

"$remat" "${args[@]}" >second.txt 2>&1 && { echo "FAIL: a re-run without --resume must refuse"; exit 1; }
"$remat" "${args[@]}" --resume >third.txt 2>&1 || { echo "FAIL: --resume failed:"; cat third.txt; exit 1; }
grep -q "wrote $((8 - done_before)) runs" third.txt || { echo "FAIL: --resume did not run exactly the missing runs:"; cat third.txt; exit 1; }
[ "$(runs)" -eq 8 ] || { echo "FAIL: $(runs) runs recorded, expected 8"; exit 1; }
! ls r.h5.partial.* r.h5.lock >/dev/null 2>&1 || { echo "FAIL: temporary or lock files remain after the resumed run"; exit 1; }
echo "interrupt: all checks passed"
