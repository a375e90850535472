#!/usr/bin/env bash
# The edges a hostile user found, each once wrong: byte sizes with suffixes,
# a run file without its optimizer state, a failed allocation, an infinite
# LoRA alpha, a results file missing a run's series, empty or padded or
# empty-handed shards, a disk that fills between two runs, and temporaries
# left by a killed save. Each must be refused (or done) in one clear line.
#   hostile_test.sh path/to/remat
set -uo pipefail
source "$(dirname "$0")/lib.sh"
remat=$1
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
runs_in() { "$python" -c "import h5py, sys; print(len(h5py.File(sys.argv[1])['runs']))" "$1"; }

cell=(matrix --models gpt2 --preset tiny --layers 1 --strategies full --warmup 0 --steps 1)

# 1. --mem-limit takes the sizes its help shows (binary suffixes).
for size in 512M 1M 2G 350k 4096; do
  "$remat" "${cell[@]}" --mem-limit $size --out "mem-$size.h5" >out.txt 2>err.txt ||
    fail "--mem-limit $size: $(cat err.txt)"
done
"$python" - <<'PY' || fail "--mem-limit 512M was not recorded as 512 MiB"
import h5py
f = h5py.File("mem-512M.h5")
(run,) = f["runs"].values()
assert run.attrs["mem_limit_bytes"] == 512 * 2**20, run.attrs["mem_limit_bytes"]
PY
expect_error "--mem-limit" "$remat" "${cell[@]}" --mem-limit 12Q --out x.h5

# 2. A run file without /optimizer cannot resume, and says why.
"$remat" train --preset tiny --steps 2 --out run.h5 >/dev/null 2>err.txt || fail "train: $(cat err.txt)"
# A run stopped at step 2 of 4 (as a --save-every checkpoint leaves it), then
# its optimizer state lost.
"$python" -c "
import h5py
f = h5py.File('run.h5', 'r+')
f.attrs['train.steps'] = '4'
del f['optimizer']"
expect_error "missing optimizer state" "$remat" train --preset tiny --steps 4 --out run.h5 --resume

# 3. An allocation the machine refuses is "out of memory", exit 2, one line.
(ulimit -v 3000000; exec "$remat" time --model gpt2 --preset tiny --seq 128 --batch 65536 --warmup 0 --steps 1 --force) >out.txt 2>err.txt
rc=$?
[ $rc -eq 2 ] || fail "a failed allocation: exit $rc, expected 2 ($(cat err.txt))"
# (The step announces itself as long work and shows its progress first.)
grep -q "out of memory" err.txt && [ "$(grep -vc "^  step " err.txt)" -eq 1 ] || fail "a failed allocation: $(cat err.txt)"

# 4. Adapters whose alpha is not finite are refused, and nothing is written.
"$remat" export --preset tiny --out base.h5 >/dev/null
"$remat" train --preset tiny --steps 1 --lora 2 --out lora.h5 >/dev/null 2>err.txt || fail "train --lora: $(cat err.txt)"
"$python" - <<'PY'
import h5py
f = h5py.File("lora.h5", "r+")
f.attrs["lora"] = f.attrs["lora"].replace("alpha=", "alpha=inf;was=")
PY
"$python" -c "import h5py; print(h5py.File('lora.h5').attrs['lora'])" | grep -q "alpha=inf" || fail "could not plant alpha=inf"
expect_error "not a LoRA setting" "$remat" lora-merge --weights base.h5 --adapters lora.h5 --out merged.h5
[ ! -e merged.h5 ] || fail "lora-merge with alpha inf wrote a file"

# 5. merge refuses a run that lacks a series a report reads.
"$remat" "${cell[@]}" --out whole.h5 >/dev/null 2>&1 || fail "matrix for merge"
cp whole.h5 cut.h5
"$python" -c "
import h5py
f = h5py.File('cut.h5', 'r+')
(run,) = f['runs'].values()
del run['timeline']"
expect_error "lacks /timeline/seconds" "$remat" merge cut.h5 --out merged.h5
cp whole.h5 cut.h5
"$python" -c "
import h5py
f = h5py.File('cut.h5', 'r+')
(run,) = f['runs'].values()
del run['step_times']"
expect_error "lacks /step_times" "$remat" merge cut.h5 --out merged.h5
[ ! -e merged.h5 ] || fail "a refused merge wrote a file"

# 6. --shard: empty, padded and empty-handed shards are refused.
expect_error "expected i/n" "$remat" "${cell[@]}" --shard '' --out x.h5
expect_error "whole numbers" "$remat" "${cell[@]}" --shard ' 0/2' --out x.h5
expect_error "has none of the matrix's 1 runs" "$remat" "${cell[@]}" --shard 5/100 --out x.h5
[ ! -e x.h5 ] || fail "a refused shard wrote a file"

# 7. The disk fills after the first of two runs: the error says the run that
# was not recorded, and the file keeps the first.
two=(matrix --models gpt2 --preset tiny --layers 1 --strategies full,per-layer --warmup 0 --steps 1)
"$remat" "${cell[@]}" --out one.h5 >/dev/null 2>&1 || fail "matrix one.h5"
"$remat" "${two[@]}" --out both.h5 >/dev/null 2>&1 || fail "matrix both.h5"
limit=$(( ($(stat -c %s one.h5) + $(stat -c %s both.h5)) / 2 / 1024 ))
(ulimit -f $limit; exec "$remat" "${two[@]}" --out full.h5) >out.txt 2>err.txt
rc=$?
[ $rc -eq 2 ] || fail "a full disk: exit $rc, expected 2 ($(cat err.txt))"
grep -q "was not recorded" err.txt && grep -q "keeps every run recorded before it (1 of this matrix)" err.txt ||
  fail "a full disk: the error does not say what the file holds: $(cat err.txt)"
grep -q "no file was created\|unchanged" err.txt && fail "a full disk: the error says the file is new or unchanged: $(cat err.txt)"
[ "$(runs_in full.h5)" = 1 ] || fail "a full disk: the file does not hold the first run"
ls full.h5.partial.* >/dev/null 2>&1 && fail "a full disk left temporaries"
grep -q "free space and rerun with --resume" err.txt || fail "a full disk: no way on is suggested: $(cat err.txt)"
"$remat" "${two[@]}" --out full.h5 --resume >out.txt 2>err.txt || fail "rerun with --resume, as suggested: $(cat err.txt)"
[ "$(runs_in full.h5)" = 2 ] || fail "rerun with --resume, as suggested: the file does not hold both runs"

# 8. A temporary left by a killed save goes with the next save.
touch run2.h5.partial.2147483646.1
"$remat" train --preset tiny --steps 2 --save-every 1 --out run2.h5 >/dev/null 2>&1 || fail "train --save-every"
[ ! -e run2.h5.partial.2147483646.1 ] || fail "a killed writer's temporary survived the next save"

finish hostile
