#!/usr/bin/env bash
# remat train as a user meets it: a run killed (kill -9) at random moments,
# mid-save included, and resumed each time, ends bitwise equal to an
# uninterrupted one; a diverging run stops in one line and keeps its last
# save; a full disk keeps the previous save; bad settings and
# foreign files are refused.
#   train_test.sh path/to/remat
set -uo pipefail
source "$(dirname "$0")/lib.sh"
remat=$1
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
same() {  # same A B OBJECT...: every object identical in both files
  local a=$1 b=$2; shift 2
  for o in "$@"; do h5diff -q "$a" "$b" "$o" "$o" >/dev/null 2>&1 || fail "$a and $b differ in $o"; done
}

base=(train --preset small --layers 2 --seq 32 --batch 4 --steps 60 --dropout 0.1 --eval-every 10
      --warmup 5 --grad-clip 1 --weight-decay 0.1 --save-every 4)
args=("${base[@]}" --model gpt2 --lr 2e-3)
begin=$(date +%s%N)
"$remat" "${args[@]}" --out whole.h5 >/dev/null 2>&1 || fail "the uninterrupted run failed"
whole_ms=$(( ($(date +%s%N) - begin) / 1000000 ))

# Killed at random moments and resumed until it completes: each attempt
# lives a random share of the uninterrupted run's time (the first two 10% to
# 30%, so that they cannot finish; then 10% to 70%), so that on a fast or a
# loaded machine alike it is killed a few times, mid-step or mid-save.
kills=0
for attempt in $(seq 60); do
  "$remat" "${args[@]}" --out cut.h5 --resume >run.txt 2>&1 &
  pid=$!
  share=$(( attempt <= 2 ? 10 + RANDOM % 21 : 10 + RANDOM % 61 ))
  ms=$(( whole_ms * share / 100 + 1 ))
  sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
  if kill -9 $pid 2>/dev/null; then kills=$((kills + 1)); fi
  wait $pid 2>/dev/null
  grep -q "is complete" run.txt && break
done
"$remat" "${args[@]}" --out cut.h5 --resume >run.txt 2>&1 || fail "the last resume failed: $(cat run.txt)"
echo "killed $kills times"
[ $kills -ge 2 ] || fail "the run was killed only $kills times: the test proves little"
same whole.h5 cut.h5 /history/loss /history/lr /history/grad_norm /history/eval_loss /params /optimizer
ls cut.h5.partial.* >/dev/null 2>&1 && fail "temporaries of killed writers survived the last save: $(ls cut.h5.partial.*)"

# The run file is a weights file: grads and the report read it.
"$remat" grads --weights whole.h5 >out.txt 2>&1 || fail "grads cannot read a run file: $(cat out.txt)"
"$remat" report whole.h5 cut.h5 --svg plots >out.txt 2>&1 || fail "report of run files failed: $(cat out.txt)"
grep -q "| whole.h5 | gpt2" out.txt && [ -s plots/loss.svg ] || fail "report of run files: $(cat out.txt)"

# A run that diverges stops in one error line (after its progress lines),
# naming the step, and keeps its last save.
"$remat" train --preset tiny --optimizer sgd --lr 1e4 --schedule constant --steps 50 --save-every 2 \
  --out diverged.h5 >out.txt 2>err.txt; rc=$?
[ $rc -eq 2 ] || fail "a diverging run: exit $rc, expected 2"
[ "$(grep -c '^remat: error' err.txt)" -eq 1 ] && tail -1 err.txt | grep -q "^remat: error: step [0-9]*: .*not finite" \
  || fail "the divergence error does not name the step in one line: $(cat err.txt)"
if [ -e diverged.h5 ]; then
  "$remat" grads --weights diverged.h5 >/dev/null 2>&1 || fail "the run file kept after divergence is not usable"
fi

# A full disk while saving keeps the previous save intact.
cp whole.h5 disk.h5
(ulimit -f 200; exec "$remat" "${args[@]}" --out disk.h5 --force) >out.txt 2>err.txt; rc=$?
[ $rc -eq 2 ] && tail -1 err.txt | grep -q "disk.h5: cannot write" || fail "saving on a full disk: exit $rc ($(cat err.txt))"
cmp -s disk.h5 whole.h5 || fail "saving on a full disk changed the previous save"

# Bad settings and foreign files.
"$remat" export --preset tiny --out weights.h5 >/dev/null
expect_error "not a training run" "$remat" train --preset tiny --steps 2 --resume --out weights.h5
expect_error "was trained with model gpt2" "$remat" "${base[@]}" --model llama --lr 2e-3 --out whole.h5 --resume
expect_error "was trained with lr" "$remat" "${base[@]}" --model gpt2 --lr 1e-3 --out whole.h5 --resume
expect_error "pass --resume to continue it" "$remat" "${args[@]}" --out whole.h5
expect_error "--lr must be a positive number" "$remat" train --preset tiny --lr 0
expect_error "--lr" "$remat" train --preset tiny --lr abc
echo "short" > short.txt
expect_error "needs" "$remat" train --preset small --layers 1 --seq 8 --batch 2 --data text:short.txt --steps 2
expect_error "runs one strategy" "$remat" train --preset tiny --strategy all

finish train
