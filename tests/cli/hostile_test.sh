#!/usr/bin/env bash
# The edges a hostile user found, each once wrong: byte sizes with suffixes,
# a run file without its optimizer state, a failed allocation, an infinite
# LoRA alpha, a results file missing a run's series, empty or padded or
# empty-handed shards, a disk that fills between two runs, and temporaries
# left by a killed save; then the newer surfaces (Hugging Face folders, the
# HTML report, estimates, fp16 loss scaling): folders replaced whole or not
# at all, outputs that are inputs or devices, inputs that would block, lists
# with empty items, sizes too large, NaN options, loss scales that cannot
# train. Each must be refused (or done) in one clear line.
#   hostile_test.sh path/to/remat
set -uo pipefail
source "$(dirname "$0")/lib.sh"
remat=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
runs_in() { py -c "import h5py, sys; print(len(h5py.File(sys.argv[1])['runs']))" "$1"; }

cell=(matrix --models gpt2 --preset tiny --layers 1 --strategies full --warmup 0 --steps 1)

# 1. --mem-limit takes the sizes its help shows (binary suffixes).
for size in 512M 1M 2G 350k 4096; do
  "$remat" "${cell[@]}" --mem-limit $size --out "mem-$size.h5" >out.txt 2>err.txt ||
    fail "--mem-limit $size: $(cat err.txt)"
done
py <<'PY' || fail "--mem-limit 512M was not recorded as 512 MiB"
import h5py
f = h5py.File("mem-512M.h5")
(run,) = f["runs"].values()
assert run.attrs["mem_limit_bytes"] == 512 * 2**20, run.attrs["mem_limit_bytes"]
PY
expect_error "--mem-limit" "$remat" "${cell[@]}" --mem-limit 12Q --out x.h5

# 2. A run file without /optimizer cannot resume, and says why.
"$remat" train --preset tiny --steps 2 --out run.h5 >/dev/null 2>err.txt || fail "train: $(cat err.txt)"
# A run stopped at step 2 of 4 (as a --save-every save leaves it), then
# its optimizer state lost.
py -c "
import h5py
f = h5py.File('run.h5', 'r+')
f.attrs['train.steps'] = '4'
del f['optimizer']"
expect_error "missing optimizer state" "$remat" train --preset tiny --steps 4 --out run.h5 --resume

# 3. An allocation the machine refuses is "out of memory", exit 2, one line.
# (The first activation, 8 GiB, is refused at once: no compute before it.
# small's width: a batch of 8 million tokens to draw first, not tiny's 67.)
(ulimit -v 3000000; exec "$remat" time --model gpt2 --preset small --batch 32768 --warmup 0 --steps 1 --force) >out.txt 2>err.txt
rc=$?
[ $rc -eq 2 ] || fail "a failed allocation: exit $rc, expected 2 ($(cat err.txt))"
# (A step that announces itself as long work shows its progress first: those lines aside, one line.)
grep -q "out of memory" err.txt && [ "$(grep -vc "^  step " err.txt)" -eq 1 ] || fail "a failed allocation: $(cat err.txt)"

# 4. Adapters whose alpha is not finite are refused, and nothing is written.
"$remat" export --preset tiny --out base.h5 >/dev/null
"$remat" train --preset tiny --steps 1 --lora 2 --out lora.h5 >/dev/null 2>err.txt || fail "train --lora: $(cat err.txt)"
py <<'PY'
import h5py
f = h5py.File("lora.h5", "r+")
f.attrs["lora"] = f.attrs["lora"].replace("alpha=", "alpha=inf;was=")
PY
py -c "import h5py; print(h5py.File('lora.h5').attrs['lora'])" | grep -q "alpha=inf" || fail "could not plant alpha=inf"
expect_error "not a LoRA setting" "$remat" lora-merge --weights base.h5 --adapters lora.h5 --out merged.h5
[ ! -e merged.h5 ] || fail "lora-merge with alpha inf wrote a file"

# 5. merge refuses a run that lacks a series a report reads.
"$remat" "${cell[@]}" --out whole.h5 >/dev/null 2>&1 || fail "matrix for merge"
cp whole.h5 cut.h5
py -c "
import h5py
f = h5py.File('cut.h5', 'r+')
(run,) = f['runs'].values()
del run['timeline']"
expect_error "lacks /timeline/seconds" "$remat" merge cut.h5 --out merged.h5
cp whole.h5 cut.h5
py -c "
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

# 9. export-hf replaces a folder whole or not at all. Refused part-way (an
# fp16 overflow in a later shard): the old folder is byte for byte as it
# was, and a refused export into a new folder leaves no folder.
"$remat" export --preset small --seed 1 --out s1.h5 >/dev/null
"$remat" export --preset small --seed 2 --out s2.h5 >/dev/null
"$remat" export-hf --weights s1.h5 --out hf --max-shard-size 300000 >/dev/null || fail "export-hf into a new folder"
(cd hf && sha1sum * >../hf.sha)
cp s2.h5 huge.h5
py <<'PY'
import h5py
f = h5py.File("huge.h5", "r+")
d = f["params/wte.weight"]
a = d[...]
a.flat[7] = 1e6
d[...] = a
PY
expect_error "beyond float16's range" "$remat" export-hf --weights huge.h5 --out hf --max-shard-size 300000 --dtype fp16 --force
grep -q "hf is as it was" err.txt || fail "a refused export does not say the folder is unchanged: $(cat err.txt)"
(cd hf && sha1sum --quiet -c ../hf.sha) || fail "a refused export changed the folder it was to replace"
[ "$(ls hf | wc -l)" = "$(wc -l <hf.sha)" ] || fail "a refused export added files to the folder"
expect_error "beyond float16's range" "$remat" export-hf --weights huge.h5 --out fresh --dtype fp16
[ ! -e fresh ] || fail "a refused export into a new folder left the folder behind"
ls -d hf.partial.* fresh.partial.* >/dev/null 2>&1 && fail "a refused export left its staging folder"

# 10. ... and killed at random moments (kill -9), the folder imports as
# exactly one of the two exports, never a mix; the next export removes what
# the killed ones left beside it.
same_params() {  # same_params A.h5 B.h5: every parameter equal
  py "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1])["params"], h5py.File(sys.argv[2])["params"]
sys.exit(0 if sorted(a) == sorted(b) and all(np.array_equal(a[k][...], b[k][...]) for k in a) else 1)
PY
}
for k in 1 2 3 4 5 6; do
  src=s$(( k % 2 + 1 )).h5
  "$remat" export-hf --weights "$src" --out hf --max-shard-size 1 --force >/dev/null 2>&1 &
  pid=$!
  sleep "0.$(( RANDOM % 9 + 1 ))$(( RANDOM % 10 ))"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  "$remat" import hf --out back.h5 --force >/dev/null 2>err.txt || fail "kill $k: the folder does not import: $(cat err.txt)"
  same_params back.h5 s1.h5 || same_params back.h5 s2.h5 || fail "kill $k: the folder holds neither export whole"
done
"$remat" export-hf --weights s1.h5 --out hf --max-shard-size 300000 --force >/dev/null || fail "export-hf after kills"
ls -d hf.partial.* >/dev/null 2>&1 && fail "staging folders of killed exports survived the next export: $(ls -d hf.partial.*)"

# 11. A folder mixed from two exports (a shard of another export copied in)
# is refused on import, naming the shard.
"$remat" export-hf --weights s2.h5 --out other --max-shard-size 300000 >/dev/null
shard=$(ls hf | grep -m1 -- '-00002-of-')
cp "other/$shard" "hf/$shard"
expect_error "mixes two exports" "$remat" import hf --out mixed.h5
[ ! -e mixed.h5 ] || fail "import of a mixed folder wrote a file"
"$remat" export-hf --weights s1.h5 --out hf --max-shard-size 300000 --force >/dev/null

# 12. An output is never an input of its command, never a device or a FIFO,
# never empty; report --html guards what it replaces as every writer does.
"$remat" "${cell[@]}" --out res.h5 >/dev/null 2>&1 || fail "matrix res.h5"
for victim in base.h5 run.h5 hf/config.json; do
  cp "$victim" victim.copy
  expect_error "refusing to replace it" "$remat" report res.h5 --html "$victim"
  cmp -s "$victim" victim.copy || fail "report --html wrote over $victim"
done
expect_error "is also an input" "$remat" report res.h5 --html res.h5 --force
expect_ok "report --html page" "$remat" report res.h5 --html page.html
expect_ok "report --html over its own page" "$remat" report res.h5 --html page.html
mkfifo fifo
expect_error "not a regular file" "$remat" report res.h5 --html fifo --force
expect_error "not a regular file" "$remat" report res.h5 --html /dev/null --force
[ -c /dev/null ] || fail "report --html replaced /dev/null"
expect_error "not a regular file" "$remat" export --preset tiny --out fifo --force
expect_error "must not be empty" "$remat" report res.h5 --html ''
expect_error "must not be empty" "$remat" report res.h5 --svg ''
expect_error "is also an input" "$remat" import hf --out hf/config.json --force
"$remat" export-hf --weights s1.h5 --out sharded --max-shard-size 300000 >/dev/null
expect_error "is also an input" "$remat" import sharded --out sharded/model.safetensors.index.json --force
expect_error "holds an input" "$remat" export-hf --weights sharded --out sharded --force

# 13. Inputs that are not regular files are refused at once, never waited on.
for name in config.json model.safetensors.index.json "$(ls sharded | grep -m1 -- '-00001-of-')"; do
  for kind in fifo zero; do
    rm -rf odd && cp -r sharded odd && rm "odd/$name"
    if [ $kind = fifo ]; then mkfifo "odd/$name"; else ln -s /dev/zero "odd/$name"; fi
    timeout 20 "$remat" import odd --out odd.h5 >out.txt 2>err.txt
    rc=$?
    [ $rc -eq 2 ] && grep -q "not a regular file" err.txt || fail "import with a $kind as $name: exit $rc ($(cat err.txt))"
  done
done
expect_error "not a regular file" "$remat" train --preset tiny --steps 1 --data text:fifo

# 14. Lists and sizes are strict: an empty item is refused with its place,
# a size too large says so.
expect_error "item 2 of '1,,2' is empty" "$remat" matrix --preset tiny --seq 1,,2 --out l.h5
expect_error "item 2 of '1,' is empty" "$remat" matrix --preset tiny --seq 1, --out l.h5
expect_error "item 2 of '1,,2' is empty" "$remat" matrix --preset tiny --batch 1,,2 --out l.h5
expect_error "item 2 of 'fp32,,bf16' is empty" "$remat" matrix --preset tiny --precisions fp32,,bf16 --out l.h5
expect_error "item 3 of 'full,sqrt,' is empty" "$remat" matrix --preset tiny --strategies full,sqrt, --out l.h5
expect_error "item 1 of ',2' is empty" "$remat" estimate --seq=,2
expect_error "must not be empty" "$remat" estimate --device ''
expect_error "must not be empty" "$remat" estimate --svg ''
expect_error "too large" "$remat" estimate --device mem:1e30
[ ! -e l.h5 ] || fail "a refused list wrote a file"

# 15. A training that cannot train says so: a loss scale outside 2^-24 to
# 2^100 is refused; 50 overflows in a row stop the run in one line.
for scale in 7e-40 1e-45 5e-324 2.98023223876953125e-08; do
  "$remat" train --preset tiny --precision fp16 --loss-scale $scale --steps 100 >out.txt 2>err.txt
  [ $? -eq 2 ] && grep -q -- "--loss-scale" err.txt || fail "--loss-scale $scale: $(cat err.txt)"
done
"$remat" train --preset tiny --precision fp16 --loss-scale 1267650600228229401496703205376 --steps 100 --out ls.h5 \
  >out.txt 2>err.txt
rc=$?
# (its progress lines come first, on stderr)
[ $rc -eq 2 ] && tail -n 1 err.txt | grep -q "step 50: 50 steps in a row skipped on an fp16 overflow" ||
  fail "50 overflows in a row: exit $rc ($(tail -n 1 err.txt))"
tail -n 1 err.txt | grep -q "try --precision bf16" || fail "50 overflows: no way on is suggested: $(tail -n 1 err.txt)"
grep -c "^step " err.txt | grep -qx 9 || fail "50 overflows: the run went on past step 50"

# 16. Messages that tell the truth: a key of the wrong type says so; a NaN
# or infinite number is refused wherever given, used or not.
rm -rf typed && cp -r sharded typed
py <<'PY'
import json
c = json.load(open("typed/config.json"))
c["model_type"] = 7
json.dump(c, open("typed/config.json", "w"))
PY
expect_error "'model_type' = 7 is not a string" "$remat" import typed --out typed.h5
expect_error "--momentum: must be a finite number, got 'nan'" "$remat" train --preset tiny --optimizer adamw --momentum nan --steps 1
expect_error "--lr: must be a finite number" "$remat" train --preset tiny --lr 1e999 --steps 1
expect_error "--dropout: must be a finite number" "$remat" check --preset tiny --dropout -nan

# 17. A shape-only estimate stays small at any size: its memory grows with
# the tensors it records, not the tokens it models (mixtral's routing at
# 2^31 tokens); past ten seconds it says what it is doing.
py "$remat" <<'PY' || fail "estimate mixtral-8x7b at S 32768 B 65536 is not small"
import resource, subprocess, sys
r = subprocess.run([sys.argv[1], "estimate", "--config", "mixtral-8x7b", "--seq", "32768", "--batch", "65536",
                    "--strategies", "full,per-layer"], capture_output=True, text=True, timeout=600)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(f"estimate mixtral-8x7b S 32768 B 65536: exit {r.returncode}, {rss / 2**20:.0f} MiB resident", file=sys.stderr)
sys.exit(0 if r.returncode == 0 and rss < 2**30 and "per-layer" in r.stdout else 1)
PY
REMAT_LONG_RUN_SECONDS=0 "$remat" estimate --config llama-7b --layers 8 --strategies full,sqrt >out.txt 2>err.txt ||
  fail "estimate with progress: $(cat err.txt)"
grep -q "strategy sqrt (2 of 2)" err.txt || fail "estimate does not say what it is doing: $(cat err.txt)"
grep -q "sqrt" out.txt || fail "estimate with progress lost its table"

finish hostile
