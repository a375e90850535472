#!/usr/bin/env bash
# --precision as a user meets it: a bf16 training on real text ends near the
# fp32 one; every model's strategies are bitwise full at bf16; a matrix
# records both precisions and the report reads them; a run file resumes only
# at its own precision; bad precisions are refused in one line.
#   precision_test.sh path/to/remat
set -uo pipefail
source "$(dirname "$0")/lib.sh"
remat=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# Real text: Debian's copy of the GPL (base-files).
text=/usr/share/common-licenses/GPL-3
[ -r "$text" ] || fail "no text to train on at $text"
run=(train --preset small --layers 2 --seq 32 --batch 4 --steps 300 --lr 2e-3 --warmup 20 --eval-every 100
     --data "text:$text")
"$remat" "${run[@]}" --out fp32.h5 >fp32.txt 2>&1 || fail "the fp32 run failed: $(tail -3 fp32.txt)"
"$remat" "${run[@]}" --precision bf16 --out bf16.h5 >bf16.txt 2>&1 || fail "the bf16 run failed: $(tail -3 bf16.txt)"
grep -q "attention, bf16," bf16.txt || fail "the bf16 run does not say its precision: $(head -1 bf16.txt)"
last_eval() { "${PYTHON:-python3}" -c "import h5py,sys; print(h5py.File(sys.argv[1],'r')['/history/eval_loss'][-1])" "$1"; }
a=$(last_eval fp32.h5) b=$(last_eval bf16.h5)
echo "eval loss after 300 steps: fp32 $a, bf16 $b"
"${PYTHON:-python3}" -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(b - a) > 0.02 * a)" "$a" "$b" ||
  fail "bf16's eval loss $b is more than 2% from fp32's $a"
h5dump -a /train.precision bf16.h5 | grep -q '"bf16"' || fail "the run file does not record its precision"
expect_error "was trained with precision bf16, this run asks for fp32" "$remat" "${run[@]}" --out bf16.h5 --resume

# Every strategy bitwise full at bf16, on every model (check exits 1 otherwise).
for model in gpt2 llama bert revformer parallel mixtral encdec; do
  expect_ok "check $model at bf16" "$remat" check --model "$model" --precision bf16
done

# A matrix over both precisions: four runs, each named by its precision, read by the report.
expect_ok "matrix over fp32 and bf16" "$remat" matrix --preset tiny --strategies full,sqrt --precisions fp32,bf16 \
  --steps 1 --out both.h5
runs=$("${PYTHON:-python3}" -c "import h5py; print(';'.join(h5py.File('both.h5', 'r')['runs']))")
[ "$runs" = "gpt2 full L2 S16 B2;gpt2 full L2 S16 B2 bf16;gpt2 sqrt L2 S16 B2;gpt2 sqrt L2 S16 B2 bf16" ] ||
  fail "both.h5 holds runs '$runs'"
"$remat" report both.h5 >report.md 2>err.txt || fail "report of both precisions: $(cat err.txt)"
# Each run in a row with its precision, compared with full at the same precision.
grep -q "^| sqrt | L2 S16 B2 | .* | yes | bf16 |$" report.md || fail "the report shows no bf16 row: $(cat report.md)"
grep -q "^| full | L2 S16 B2 | [0-9.]* | 1.00x | .* | fp32 |$" report.md || fail "no fp32 full row: $(cat report.md)"
grep -q "^| full | L2 S16 B2 | [0-9.]* | 1.00x | .* | bf16 |$" report.md || fail "bf16's full is not its own reference: $(cat report.md)"

# Bad input: one line, exit 2.
expect_error "--precision: fp8 not in {fp32,bf16}" "$remat" check --precision fp8
expect_error "fp8 not in {fp32,bf16}" "$remat" matrix --precisions fp32,fp8 --out x.h5
finish precision
