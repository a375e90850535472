#!/usr/bin/env bash
# The remat command line as a user meets it: help, the happy path, and an
# exit code of 2 with a one-line error and no output file for bad input.
#   cli_test.sh path/to/remat
set -uo pipefail
source "$(dirname "$0")/lib.sh"
remat=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
expect_error() {  # expect_error "fragment" cmd...: exit 2, one line naming the fragment, no r.h5
  local fragment=$1; shift
  rm -f r.h5
  "$@" >out.txt 2>err.txt
  local rc=$?
  [ $rc -eq 2 ] || fail "$*: exit $rc, expected 2"
  grep -qF -- "$fragment" err.txt || fail "$*: error does not mention '$fragment': $(cat err.txt)"
  [ "$(grep -c . err.txt)" -le 1 ] || fail "$*: error is more than one line: $(cat err.txt)"
  [ ! -e r.h5 ] && ! ls r.h5.partial* >/dev/null 2>&1 || fail "$*: left an output file behind"
}

for sub in "" models export grads; do
  expect_ok "help $sub" "$remat" $sub --help
  grep -q "Usage" out.txt || fail "no usage text for '$sub --help'"
done
"$remat" export --help | grep -q "gpt2" || fail "export --help does not list the models"
"$remat" export --help | grep -q "small" || fail "export --help does not list the presets"

expect_ok "models" "$remat" models
grep -q "gpt2" out.txt || fail "models does not list gpt2"
grep -q "28.0k" out.txt || fail "models does not show gpt2 tiny's parameter count"
grep -q "^llama-70b .* 68976648192 parameters" out.txt || fail "models does not list llama-70b's exact count: $(cat out.txt)"

# Published configurations wherever a preset is; what they refuse.
expect_ok "check --config" "$remat" check --config gpt2-124m --layers 1 --seq 8 --strategies full,per-layer
grep -q "gpt2 gpt2-124m (L 1, D 768, H 12, S 8, B 1)" out.txt || fail "check --config: $(head -3 out.txt)"
expect_ok "matrix --config" "$remat" matrix --config gpt2-124m --layers 1 --seq 8 --strategies full --steps 1 \
  --warmup 0 --out config.h5
expect_error "--config and --preset" "$remat" check --config llama-7b --preset small
expect_error "that configuration is a llama" "$remat" time --config llama-7b --model gpt2
expect_error "at most 1024 positions" "$remat" check --config gpt2-124m --seq 2048
expect_error "that configuration is a llama" "$remat" matrix --config llama-7b --models gpt2 --out x.h5
expect_error "holds positions for 1024" "$remat" matrix --config gpt2-124m --seq 2048 --out x.h5
expect_error "needs about" "$remat" check --config llama-70b

expect_ok "export" "$remat" export --model gpt2 --preset tiny --seed 1 --out w.h5
expect_ok "grads" "$remat" grads --weights w.h5 --out r.h5
grep -qE "^loss [0-9.]+" out.txt || fail "grads does not print the loss"
[ -s r.h5 ] || fail "grads wrote no r.h5"
# The threaded paths (the rest of the suite runs on one thread): every
# model's loss and gradients bitwise the same on 1 and 2 threads, and on 2
# every strategy bitwise full's (with dropout, at fp32 and bf16).
for model in gpt2 llama bert revformer parallel mixtral encdec; do
  "$remat" export --model "$model" --preset tiny --seed 1 --out "threads-$model.h5" >/dev/null 2>err.txt ||
    fail "export $model: $(cat err.txt)"
  for n in 1 2; do
    expect_ok "$model on $n threads" env -u OMP_NUM_THREADS "$remat" --kokkos-num-threads=$n grads \
      --weights "threads-$model.h5" --out "threads-$n.h5"
  done
  h5diff -q threads-1.h5 threads-2.h5 /grads /grads && h5diff -q threads-1.h5 threads-2.h5 /loss /loss ||
    fail "$model: the gradients depend on the thread count"
done
for precision in fp32 bf16; do
  expect_ok "every strategy on 2 threads, $precision" env -u OMP_NUM_THREADS "$remat" --kokkos-num-threads=2 check \
    --model mixtral --preset tiny --dropout 0.1 --precision "$precision" --strategies all
done

expect_error "gpt5" "$remat" export --model gpt5 --out r.h5
expect_error "no such file" "$remat" grads --weights absent.h5 --out r.h5
echo "not hdf5" > bad.h5
expect_error "not an HDF5 file" "$remat" grads --weights bad.h5 --out r.h5
head -c 4000 w.h5 > truncated.h5
expect_error "truncated.h5" "$remat" grads --weights truncated.h5 --out r.h5
py <<'PY' || fail "could not prepare the malformed files with h5py"
import h5py, shutil
for name, edit in {
    "missing.h5": lambda f: f["params"].pop("h.0.attn.c_proj.bias"),
    "extra.h5": lambda f: f.create_dataset("params/h.9.ln_1.weight", data=[0.0] * 32, dtype="f4"),
    "shape.h5": lambda f: (f["params"].pop("wte.weight"), f.create_dataset("params/wte.weight", shape=(64, 31), dtype="f4")),
    "dtype.h5": lambda f: (f["params"].pop("wte.weight"), f.create_dataset("params/wte.weight", shape=(64, 32), dtype="f8")),
    "model.h5": lambda f: f.attrs.__setitem__("model", "gpt5"),
}.items():
    shutil.copy("w.h5", name)
    with h5py.File(name, "r+") as f:
        edit(f)
PY
expect_error "missing parameter 'h.0.attn.c_proj.bias'" "$remat" grads --weights missing.h5 --out r.h5
expect_error "unexpected parameter 'h.9.ln_1.weight'" "$remat" grads --weights extra.h5 --out r.h5
expect_error "'wte.weight' has shape [64, 31], expected [64, 32]" "$remat" grads --weights shape.h5 --out r.h5
expect_error "'wte.weight' holds float64, expected float32" "$remat" grads --weights dtype.h5 --out r.h5
expect_error "unknown model 'gpt5'" "$remat" grads --weights model.h5 --out r.h5

# Golden regression: a drifted gradient fails and names the parameter.
expect_ok "save golden" "$remat" check --preset tiny --strategies full --save-golden golden.h5
expect_ok "golden" "$remat" check --golden golden.h5 --strategies full,per-layer
grep -q "golden golden.h5: pass: 2 of 2 strategies within tolerance (loss: relative" out.txt ||
  fail "check --golden ends without a verdict naming the tolerance: $(tail -2 out.txt)"
py -c "
import h5py
with h5py.File('golden.h5', 'r+') as f:
    f['grads/h.1.mlp.c_fc.weight'][0, 0] += 1.0
" || fail "could not perturb the golden file"
"$remat" check --golden golden.h5 --strategies full >out.txt 2>err.txt
rc=$?
[ $rc -eq 1 ] || fail "a drifted golden file: exit $rc, expected 1"
grep -q "h.1.mlp.c_fc.weight" err.txt || fail "the drift error does not name the parameter: $(cat err.txt)"
grep -q "golden golden.h5: DRIFT: 0 of 1 strategies within tolerance" out.txt ||
  fail "a drifted golden check ends without its verdict: $(tail -2 out.txt)"

# Long work says so first and shows where each step is (the threshold moved
# to 0 s so that a tiny run counts as long); short work says nothing of it.
REMAT_LONG_RUN_SECONDS=0 "$remat" check --preset tiny --strategies per-layer >out.txt 2>err.txt ||
  fail "a long check: $(cat err.txt)"
grep -q "this will take about .* step(s) of .* TFLOP at the .* GFLOP/s measured here; memory about" out.txt ||
  fail "a long check does not give its estimate: $(head -3 out.txt)"
grep -q "step 1, forward: h.0 (of 2 blocks)" err.txt || fail "a long check shows no progress within the step: $(cat err.txt)"
expect_ok "a short check" "$remat" check --preset tiny --strategies per-layer
grep -q "this will take" out.txt && fail "a short check announces itself as long"

# A run that reads a file more than once says so, and its loss plot marks
# where each new pass began.
head -c 3000 "$cli_tests/../../README.md" > pass.txt
expect_ok "train on a short text" "$remat" train --preset small --layers 1 --seq 16 --batch 2 --data text:pass.txt \
  --steps 120 --out pass.h5
grep -q "text:pass.txt: one pass is 84 batches, so this run reads it 1.4 times" out.txt ||
  fail "train does not say it reads its data more than once: $(head -3 out.txt)"
grep -q "^data: text:pass.txt$" out.txt || fail "train does not name its data: $(head -3 out.txt)"
expect_ok "report passes" "$remat" report pass.h5 --svg pass-plots
grep -q "a new pass over text:pass.txt begins: 85," pass-plots/loss.svg || fail "the loss plot marks no new pass"
# No validation run: the plot says training loss, with ln V (a uniform guess) to read it against.
grep -q ">Training loss<" pass-plots/loss.svg ||
  fail "the loss plot of a run without validation is not titled Training loss"
grep -q "Training and validation" pass-plots/loss.svg && fail "the loss plot names a validation run that is not there"
grep -q "ln V = 5.55 (uniform guess)" pass-plots/loss.svg || fail "the loss plot has no ln V line"
expect_ok "train on random tokens" "$remat" train --preset tiny --steps 1
grep -q "data: random tokens, uniform over the vocabulary: nothing to learn, the loss stays near ln V = 4.16" out.txt ||
  fail "train on random tokens does not say they cannot be learned: $(head -4 out.txt)"

# remat estimate: real sizes, shape-only, in a moment; bad input in one line.
expect_ok "estimate llama-70b" "$remat" estimate --config llama-70b --seq 32768 --allow-longer --ranks 8 --shard-params --device h200-141gb
grep -q "68976648192 parameters" out.txt || fail "estimate does not count llama-70b's parameters: $(cat out.txt)"
grep -q "^offload-checkpoint .* no (" out.txt || fail "estimate does not say what fits: $(cat out.txt)"
grep -q "1.0 GiB fixed overhead" out.txt || fail "estimate does not show the device's overhead: $(cat out.txt)"
expect_ok "estimate json" "$remat" estimate --preset tiny --seq 8,16 --batch 1,2 --strategies full,sqrt --json
[ "$(grep -c '"strategy"' out.txt)" = 8 ] || fail "estimate --json does not give one object per (strategy, seq, batch)"
expect_ok "estimate svg" "$remat" estimate --preset tiny --seq 8,16 --batch 1,2 --strategies full,per-layer --device mem:1M --svg est
grep -q "mem:1M usable" est/estimate.svg && [ "$(grep -c "B [12]</text>" est/estimate.svg)" = 2 ] ||
  fail "estimate --svg: no panel per batch or no capacity line"
expect_ok "estimate svg, bf16 over ranks" "$remat" estimate --preset tiny --seq 8,16 --precision bf16 --ranks 2 \
  --shard-params --svg est2
grep -q ">gpt2 tiny, bf16, 2 ranks (parameters sharded), B 2<" est2/estimate.svg ||
  fail "estimate --svg: the panel title omits precision, ranks or sharding"
# With dropout (its outputs kept beside its inputs): every model's and strategy's measured peaks are the estimate's.
# (small's widths: on tiny the logits decide every peak, dropout or not)
D=(--preset small --layers 2 --seq 64 --batch 2 --dropout 0.1 --strategies all --json)
for model in gpt2 llama mixtral encdec bert revformer parallel; do
  "$remat" check --model "$model" "${D[@]}" >check.json 2>err.txt || fail "check $model --dropout: $(cat err.txt)"
  "$remat" estimate --model "$model" "${D[@]}" >estimate.json 2>err.txt ||
    fail "estimate $model --dropout: $(cat err.txt)"
  py check.json estimate.json <<'PY' || fail "$model --dropout 0.1: the measured peaks are not the estimate's"
import sys, json
check, estimate = (json.load(open(p)) for p in sys.argv[1:])
peaks = lambda rows: {r["strategy"]: (r["activation_peak_bytes"], r["offload_peak_bytes"]) for r in rows}
assert peaks(check["strategies"]) == peaks(estimate), (peaks(check["strategies"]), peaks(estimate))
PY
done
"$remat" estimate --model gpt2 --preset small --layers 2 --seq 64 --batch 2 --strategies full --json >plain.json
"$remat" estimate --model gpt2 "${D[@]/#all/full}" >dropout.json
py -c "import json; assert json.load(open('plain.json'))[0]['activation_peak_bytes'] < json.load(open('dropout.json'))[0]['activation_peak_bytes']" ||
  fail "estimate --dropout keeps no dropout output"
expect_error "not a device remat knows" "$remat" estimate --device h100
expect_error "not in" "$remat" estimate --config llama-8b
expect_error "that configuration is a llama" "$remat" estimate --model gpt2 --config llama-7b
expect_error "--allow-longer" "$remat" estimate --config llama-7b --seq 8192
expect_error "overflow 64-bit byte counts" "$remat" estimate --config llama-70b --seq 1000000 --allow-longer --batch 65536
expect_error "name a --device" "$remat" estimate --preset tiny --strategies budget:min
expect_error "name a --device" "$remat" estimate --preset tiny --strategies budget:min --device mem:1G
expect_ok "estimate a plan" "$remat" estimate --preset tiny --layers 6 --strategies full,budget:min --device a100-40gb
grep -q "^budget:min .* yes (" out.txt || fail "estimate does not run budget:min on a device model: $(cat out.txt)"
expect_ok "plan --device" "$remat" plan --config gpt2-124m --seq 256 --device l4-24gb
grep -q "a budget of .* for activations" out.txt && grep -q "^predicted step" out.txt ||
  fail "plan --device does not plan within what the device leaves: $(cat out.txt)"
expect_error "no schedule fits" "$remat" plan --config llama-7b --device h100-80gb
# QLoRA makes room: the 4-bit base and the adapters' state fit where full training did not.
expect_ok "plan --quantize" "$remat" plan --config llama-7b --device h100-80gb --lora 8 --quantize nf4
expect_ok "plan --quantize, timed" "$remat" plan --preset tiny --layers 6 --lora 2 --quantize int8 --budget min
expect_error "no rates" "$remat" plan --preset tiny --device mem:1G
expect_error "required without --device" "$remat" plan --preset tiny
# The layout planner: every split of 4 GPUs costed; the fastest that fits says the memory and step `estimate` gives
# its layout, to the byte; the blocks of a stage too big alone dropped uncosted; bad requests refused.
P=(plan --config llama-7b --layers 8 --seq 4096 --gpus 4 --device l4-24gb --precision bf16 --global-batch 65536)
expect_ok "plan --gpus" "$remat" "${P[@]}" --json
cp out.txt layouts.json
py layouts.json <<'PY' || fail "plan --gpus: $(head -c 600 layouts.json)"
import sys, json
rows = json.load(open(sys.argv[1]))
fit = [r for r in rows if r["fits"]]
assert fit and len(fit) < len(rows), (len(fit), len(rows))  # some fit, some do not
assert [r["step_s"] for r in fit] == sorted(r["step_s"] for r in fit)  # fastest first
assert all(r["headroom_bytes"] >= 0 and "why_not" not in r for r in fit)
assert all(r["why_not"] for r in rows if not r["fits"])
runs = lambda r: (r["tp"] > 1) + (r["cp"] > 1) + (r["pp"] > 1) <= 1 and not (r["sharded"] and (r["cp"] > 1 or r["pp"] > 1))
assert all(r["runs"] == ("yes" if runs(r) else "estimate only") for r in rows)
# ZeRO-3 searched beside plain data parallelism, without cp (under pp each stage's state sharded), in its own
# flags; interleaved:2 beside 1f1b
zero = [r for r in rows if r["sharded"]]
assert zero and all(r["cp"] == 1 and r["dp"] > 1 and "--shard-params" in r["flags"] for r in zero)
staged = [r for r in zero if r["pp"] > 1]
assert staged and all("--pp" in r["flags"] for r in staged)
chunks = [r for r in rows if r["schedule"] == "interleaved:2"]
assert chunks and all(r["pp"] > 1 and "--schedule interleaved:2" in r["flags"] for r in chunks)
# zb-h1 on the same stages as every 1f1b pipeline
zb = [r for r in rows if r["schedule"] == "zb-h1"]
assert zb and all("--schedule zb-h1" in r["flags"] for r in zb)
assert len(zb) == len([r for r in rows if r["schedule"] == "1f1b" and r["pp"] > 1])
fastest = lambda rows: min((r for r in rows if r["fits"]), key=lambda r: r["step_s"])
staged_row = min(staged, key=lambda r: r["largest_total_bytes"])  # fitting or not, its memory is estimate's
for name, row in (("best", fit[0]), ("zero", fastest(zero)), ("zero-pp", staged_row), ("chunks", fastest(chunks)),
                  ("zb", fastest(zb))):
    open(name + ".txt", "w").write(row["flags"] + " --strategies " + row["strategy"] + "\n")
    open(name + ".json", "w").write(json.dumps(row))
PY
for planned in best zero zero-pp chunks zb; do
  read -r -a flags <"$planned.txt"
  expect_ok "estimate of the planned layout ($planned)" "$remat" estimate --config llama-7b --layers 8 --seq 4096 \
    --precision bf16 --device l4-24gb "${flags[@]}" --json
  py "$planned.json" out.txt <<'PY' || fail "plan --gpus: the $planned layout's memory is not estimate's: $(cat "$planned.txt")"
import sys, json
best, rows = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert max(r["total_bytes"] for r in rows) == best["largest_total_bytes"], (rows, best)
PY
done
expect_ok "plan --gpus, text" "$remat" "${P[@]}"
grep -q "the fastest that fit" out.txt && grep -q "dropped, the closest to fitting" out.txt ||
  fail "plan --gpus text: $(cat out.txt)"
expect_ok "plan --gpus, a big model" "$remat" plan --config llama-7b --seq 4096 --gpus 2 --device l4-24gb --precision bf16 \
  --global-batch 8192
grep -q "blocks alone, .* is over" out.txt || fail "plan --gpus costs a layout whose blocks alone overflow: $(cat out.txt)"
expect_error "needs --device" "$remat" plan --config llama-7b --gpus 8
expect_error "leave out --tp" "$remat" plan --config llama-7b --gpus 8 --tp 2 --device h100-80gb
expect_error "less than one sequence" "$remat" plan --config llama-7b --gpus 8 --device h100-80gb --global-batch 100
expect_error "--global-batch applies with --gpus" "$remat" plan --config llama-7b --device h100-80gb --global-batch 8192
expect_error "are not searched there yet" "$remat" plan --config llama-7b --gpus 8 --device h100-80gb --lora 8
# Where a strategy does not fit, estimate says at what it would: the largest B, a shorter S, more sharded ranks.
E=(estimate --config llama-7b --seq 4096 --ranks 4 --shard-params --strategies full --precision bf16 --device h100-80gb)
expect_ok "estimate, full does not fit" "$remat" "${E[@]}" --batch 16
grep -Eq "^  full: at B ([0-9]+) \(S 4096\), or at S ([0-9]+) \(B 16\)" out.txt || fail "no refit: $(cat out.txt)"
fit_b=$(sed -nE 's/^  full: at B ([0-9]+) .*/\1/p' out.txt)
fit_s=$(sed -nE 's/^  full: .*or at S ([0-9]+) \(B 16\).*/\1/p' out.txt)
fit_r=$(sed -nE 's/^  full: .*over ([0-9]+) sharded ranks.*/\1/p' out.txt)
expect_ok "estimate at the largest B" "$remat" "${E[@]}" --batch "$fit_b"
grep -q "^full .* yes (" out.txt || fail "full does not fit at B $fit_b: $(cat out.txt)"
expect_ok "estimate one above" "$remat" "${E[@]}" --batch "$((fit_b + 1))"
grep -q "^full .* no (" out.txt || fail "full fits at B $((fit_b + 1)) too: not the largest"
"$remat" "${E[@]}" --batch 16 --json >refit.json 2>err.txt || fail "estimate --json: $(cat err.txt)"
py -c "import json; r = json.load(open('refit.json'))[0]; assert not r['fits'] and r['would_fit_batch'] == $fit_b \
  and r['would_fit_seq'] == ${fit_s:-0} and r['would_fit_ranks'] == ${fit_r:-0}, r" || fail "estimate --json's refit is not the text's"
expect_error "--ranks 2 or more" "$remat" estimate --preset tiny --shard-params
# A plan under sharding plans its activations as train does (before sharding), and keeps them.
expect_ok "estimate --shard-params budget" "$remat" estimate --config llama-7b --ranks 8 --shard-params --precision bf16 \
  --device h100-80gb --strategies budget:2G,budget:min
grep -q "^budget:min .* yes (" out.txt || fail "estimate --shard-params does not plan budget:min: $(cat out.txt)"
grep -q "in 16 bits: each rank converts its float32 shard" out.txt || fail "estimate does not say sharding gathers 16 bits"
grep -q "16-bit weight copy" out.txt && fail "estimate --shard-params counts a whole 16-bit weight copy: $(cat out.txt)"

# remat time: steps timed in this process, the resident set and the tracker beside it.
expect_ok "time" "$remat" time --preset tiny --strategy per-layer --steps 2
grep -q "step time: median" out.txt || fail "time does not print the median step time"
grep -q "resident set: peak" out.txt || fail "time does not print the resident set"
expect_ok "check --json" "$remat" check --preset tiny --strategies full,per-layer --json
py -c "import json,sys; d=json.load(open('out.txt')); r=d['strategies']; sys.exit(0 if [x['strategy'] for x in r] == ['full', 'per-layer'] and r[1]['bitwise'] and d['not_bitwise_exact'] == 0 else 1)" \
  || fail "check --json is not the expected JSON: $(cat out.txt)"
expect_error "excludes" "$remat" check --preset tiny --json --trace
expect_ok "time --json" "$remat" time --preset tiny --model llama --strategy full --steps 1 --json
py -c "import json,sys; d=json.load(open('out.txt')); sys.exit(0 if d['median_s'] > 0 and d['activation_peak_bytes'] > 0 else 1)" \
  || fail "time --json is not the expected JSON: $(cat out.txt)"
expect_error "runs one strategy" "$remat" time --preset tiny --strategy all
expect_error "reversible" "$remat" time --preset tiny --model gpt2 --strategy reversible


# --- hardening: every bad input is one line and exit 2; no file is lost ---
expect_ok "version" "$remat" --version
grep -q "^remat [0-9.]*, Kokkos [0-9.]*, backends:" out.txt || fail "--version: $(cat out.txt)"

# Outputs never replace inputs or files of another kind.
cp w.h5 w.bak
"$remat" grads --weights w.h5 --out w.h5 >out.txt 2>err.txt; rc=$?
[ $rc -eq 2 ] && grep -q "is also an input" err.txt || fail "grads --out = --weights: exit $rc, $(cat err.txt)"
cmp -s w.h5 w.bak || fail "grads --out = --weights changed the weights file"
"$remat" matrix --preset tiny --strategies full --layers 2 --steps 1 --out res.h5 >/dev/null 2>&1 || fail "tiny matrix failed"
cp res.h5 res.bak
"$remat" export --preset tiny --out res.h5 >out.txt 2>err.txt; rc=$?
[ $rc -eq 2 ] && grep -q "is a results file" err.txt || fail "export over a results file: exit $rc, $(cat err.txt)"
cmp -s res.h5 res.bak || fail "export over a results file changed it"
"$remat" check --preset tiny --strategies full --save-golden res.h5 >out.txt 2>err.txt; rc=$?
[ $rc -eq 2 ] && cmp -s res.h5 res.bak || fail "--save-golden over a results file: exit $rc"
expect_ok "export --force" "$remat" export --preset tiny --out res.h5 --force
cp w.bak w.h5

# A full disk (a file-size limit on the process) keeps the previous file intact.
for cmd in "export --preset small --out w.h5" "grads --weights w.bak --out w.h5 --force" \
           "check --preset small --layers 2 --strategies full --save-golden w.h5 --force"; do
  cp w.bak w.h5
  # (no long-run notice: under a sanitizer's slow build its progress lines would join the error's)
  (ulimit -f 64; export REMAT_LONG_RUN_SECONDS=1e9; exec "$remat" $cmd) >out.txt 2>err.txt; rc=$?
  [ $rc -eq 2 ] || fail "$cmd on a full disk: exit $rc, expected 2 ($(cat err.txt))"
  [ "$(grep -c . err.txt)" -le 1 ] || fail "$cmd on a full disk: more than one line: $(cat err.txt)"
  cmp -s w.h5 w.bak || fail "$cmd on a full disk damaged the previous file"
  ! ls w.h5.partial* >/dev/null 2>&1 || fail "$cmd on a full disk left a temporary file"
done
cp res.bak res.h5
(ulimit -f 8; exec "$remat" matrix --preset tiny --strategies per-layer --layers 2 --steps 1 --out res.h5) >out.txt 2>err.txt; rc=$?
[ $rc -eq 2 ] && cmp -s res.h5 res.bak || fail "a matrix append on a full disk: exit $rc, file intact? $(cat err.txt)"
cp w.bak w.h5

# A read-only results file is refused before any run, not after all of them.
cp res.bak ro.h5 && chmod 444 ro.h5
"$remat" matrix --preset tiny --strategies per-layer --layers 2 --steps 1 --out ro.h5 >out.txt 2>err.txt; rc=$?
[ $rc -eq 2 ] && grep -q "read-only" err.txt && ! grep -q "warm-up" err.txt || fail "read-only results file: exit $rc, $(cat err.txt)"

# Malformed options and sizes.
expect_error "--kokkos-num-threads" "$remat" --kokkos-num-threads=-1 models
expect_error "--kokkos-threads" "$remat" --kokkos-threads=x models
expect_error "--kokkos-numa" "$remat" --kokkos-numa=-5 models
expect_error "--kokkos-num-threads" "$remat" --kokkos-num-threads=1000 models
expect_error "must be a whole number from 1 to 65536, got '0'" "$remat" export --layers 0 --out r.h5
expect_error "must be a whole number from 0 to" "$remat" export --seed -1 --out r.h5
expect_error "not a positive size" "$remat" matrix --preset tiny --mem-limit 0 --out r.h5
expect_error "not a positive size" "$remat" matrix --preset tiny --mem-limit -1 --out r.h5
expect_error "not a regular file" "$remat" check --preset tiny --data "text:$work"
expect_error "text:$work" "$remat" matrix --preset small --strategies full --data "text:$work" --out r.h5
expect_error "needs about" "$remat" check --preset small --layers 60000 --strategies full
expect_error "needs about" "$remat" matrix --preset gpu-medium --models gpt2 --batch 64 --out r.h5

# A selective tag the model does not produce is one line listing the ones it does.
expect_error "produces no tag 'bogus'; its tags: add, attention, attention_lse" "$remat" check --preset tiny --strategies selective:bogus
expect_error "would have no effect" "$remat" check --preset tiny --strategies full+offload

# The planner: a plan printed, run and measured within its budget; budgets in the matrix and the report.
expect_ok "plan" "$remat" plan --preset tiny --layers 6 --budget 40%
grep -q "predicted activation peak" out.txt || fail "plan prints no predicted peak: $(cat out.txt)"
expect_ok "plan offload" "$remat" plan --preset tiny --layers 6 --budget 30% --allow-offload
grep -q "budget:30%:offload" out.txt || fail "plan --allow-offload does not plan budget:30%:offload: $(cat out.txt)"
expect_ok "plan json" "$remat" plan --preset tiny --layers 6 --budget min --json
grep -q '"plan": \[' out.txt || fail "plan --json has no plan: $(cat out.txt)"
expect_ok "check budget" "$remat" check --preset tiny --layers 6 --strategies budget:min,budget:50% --dropout 0.1
grep -q "^budget:min .* yes" out.txt || fail "budget:min is not bitwise full: $(cat out.txt)"
expect_ok "matrix budget:auto" "$remat" matrix --preset tiny --layers 4 --models gpt2 --strategies per-layer,budget:auto --steps 1 --out auto.h5
expect_ok "report budget:auto" "$remat" report auto.h5 --svg auto-plots
grep -q "planner (budget:...)" auto-plots/tradeoff.svg || fail "the trade-off plot has no planner front"
# A strategy that is full in all but name is no point or panel of its own: full's legend names it.
expect_ok "matrix with a no-op" "$remat" matrix --preset tiny --models gpt2 --strategies full,selective:attn-core,per-layer \
  --steps 1 --warmup 0 --out noop.h5
expect_ok "report a no-op" "$remat" report noop.h5 --svg noop-plots
for plot in tradeoff timeline-gpt2; do
  grep -q "full (= selective:attn-core here)" noop-plots/$plot.svg || fail "$plot.svg does not say full = selective:attn-core"
  [ "$(grep -c "selective:attn-core" noop-plots/$plot.svg)" = "$(grep -c "full (= selective:attn-core here)" noop-plots/$plot.svg)" ] ||
    fail "$plot.svg shows selective:attn-core as a result of its own"
done
expect_ok "train budget" "$remat" train --preset tiny --strategy budget:range:50% --steps 3
grep -q "final loss 4.1467" out.txt || fail "training under a budget is not full's trajectory: $(cat out.txt)"
expect_ok "time budget" "$remat" time --preset tiny --strategy budget:60% --steps 1
expect_error "the smallest feasible budget is" "$remat" plan --preset tiny --budget 1KB
expect_error "the smallest feasible budget is" "$remat" check --preset tiny --strategies budget:1KB
expect_error "is not a percentage" "$remat" check --preset tiny --strategies budget:0%
expect_error "composes with no other strategy" "$remat" check --preset tiny --strategies budget:1G+offload

# Fine-tuning: frozen layers and LoRA in check and time; bad options are one line.
expect_ok "check freeze" "$remat" check --preset tiny --layers 4 --strategies full,per-layer --freeze-below 2 --dropout 0.1
grep -q "^fine-tuning (freeze-below 2): " out.txt || fail "check --freeze-below does not say what it froze: $(cat out.txt)"
expect_ok "check freeze trace" "$remat" check --preset tiny --layers 4 --strategies per-layer --freeze-below 2 --trace
grep -q "block h.0: skipped by the region" out.txt || fail "--trace does not show the skipped frozen block: $(cat out.txt)"
expect_ok "check lora" "$remat" check --preset tiny --model llama --strategies full,selective --lora 2
grep -q "LoRA rank=2" out.txt || fail "check --lora does not say so: $(cat out.txt)"
expect_ok "check lora trace" "$remat" check --preset tiny --model llama --strategies full --lora 2 --trace
grep -q "linear: not saved rms_norm .*(its weight is frozen" out.txt || fail "--trace does not show a frozen linear's unsaved input: $(cat out.txt)"
expect_ok "time lora" "$remat" time --preset tiny --strategy per-layer --lora 2 --freeze 'h.0.*' --steps 1
expect_ok "matrix" "$remat" matrix --preset tiny --strategies full,per-layer --steps 1 --out ft.h5
expect_ok "matrix freeze" "$remat" matrix --preset tiny --strategies full,per-layer --steps 1 --freeze-below 1 --out ft.h5
expect_ok "matrix lora" "$remat" matrix --preset tiny --strategies full --steps 1 --lora 2 --out ft.h5
expect_ok "report fine-tuning" "$remat" report ft.h5
grep -q "^| per-layer (freeze-below 1) " out.txt || fail "the report does not show the frozen runs: $(cat out.txt)"
grep -q "^| full (lora 2) | L2 S16 B2 | [0-9.]* | 1.00x" out.txt || fail "the report does not compare the LoRA runs with their full: $(cat out.txt)"
expect_error "matches no parameter" "$remat" check --preset tiny --freeze 'nothing.*'
expect_error "the model has 2 blocks" "$remat" check --preset tiny --freeze-below 3
expect_error "leaves nothing to train" "$remat" check --preset tiny --freeze '*'
expect_error "is not a linear weight" "$remat" check --preset tiny --lora 2 --lora-targets wpe.weight
expect_error "above the smaller dimension" "$remat" check --preset tiny --lora 1000
# LoRA training, adapters on their own, and folding them into plain weights.
expect_ok "train lora" "$remat" train --model llama --steps 4 --lora 2 --lr 1e-2 --out lora-run.h5 --adapters-out adapters.h5
grep -q "wrote adapters.h5" out.txt || fail "train --adapters-out does not say what it wrote: $(cat out.txt)"
expect_error "remat lora-merge" "$remat" grads --weights lora-run.h5 --out r.h5
# The fix the error suggests is a command that works.
suggested=$(sed -n 's/.*first: remat \(lora-merge .*\)$/\1/p' err.txt)
[ -n "$suggested" ] || fail "no lora-merge command in: $(cat err.txt)"
rm -f merged.h5
# shellcheck disable=SC2086
"$remat" $suggested >out.txt 2>&1 && [ -f merged.h5 ] || fail "the suggested '$suggested' fails: $(cat out.txt)"
expect_error "holds LoRA adapters alone" "$remat" grads --weights adapters.h5 --out r.h5
expect_ok "lora-merge" "$remat" lora-merge --weights lora-run.h5 --adapters adapters.h5 --out merged.h5 --force
grep -q "wrote merged.h5: the weights of lora-run.h5 with 4 adapters" out.txt ||
  fail "lora-merge does not say what it wrote: $(cat out.txt)"
expect_ok "grads on merged weights" "$remat" grads --weights merged.h5
expect_ok "export llama" "$remat" export --model llama --preset tiny --out llama.h5
expect_error "adapters for another model or shape" "$remat" lora-merge --weights w.h5 --adapters adapters.h5 --out r.h5
expect_error "holds no LoRA adapters" "$remat" lora-merge --weights llama.h5 --adapters llama.h5 --out r.h5
expect_error "needs --lora" "$remat" train --steps 2 --adapters-out r.h5

# Non-finite weights are refused; a non-finite result is an error, not "loss nan".
py <<'PY' || fail "could not prepare the non-finite files"
import h5py, shutil, numpy as np
shutil.copy("w.h5", "nan.h5")
with h5py.File("nan.h5", "r+") as f:
    f["params/ln_f.weight"][3] = np.nan
shutil.copy("w.h5", "huge.h5")
with h5py.File("huge.h5", "r+") as f:
    f["params/wte.weight"][...] = 3e38
PY
expect_error "non-finite value" "$remat" grads --weights nan.h5 --out r.h5
expect_error "not finite" "$remat" grads --weights huge.h5 --out r.h5

# Two matrices appending to one results file at once: nothing lost, nothing damaged.
for trial in 1 2 3; do
  rm -f both.h5
  "$remat" matrix --preset tiny --layers 2 --strategies full,per-layer --steps 1 --out both.h5 >a.txt 2>&1 &
  a=$!
  "$remat" matrix --preset tiny --layers 3 --strategies full,per-layer --steps 1 --out both.h5 >b.txt 2>&1 &
  b=$!
  wait $a || fail "concurrent matrix A failed: $(cat a.txt)"
  wait $b || fail "concurrent matrix B failed: $(cat b.txt)"
  n=$("$remat" report both.h5 2>/dev/null | grep -c '^| .* | L[0-9]* S16 B2 |')
  [ "$n" -eq 4 ] || fail "concurrent appends, trial $trial: $n runs recorded, expected 4"
  ! ls both.h5.partial* both.h5.lock >/dev/null 2>&1 || fail "concurrent appends left temporary or lock files"
done

# A reader holding the results file open (h5py, which takes HDF5's file lock)
# does not make an append fail: remat replaces files whole, without that lock.
"${PYTHON:-python3}" -c "
import h5py, os, time
f = h5py.File('both.h5', 'r')
open('reading', 'w').close()
time.sleep(30)
" &
reader=$!
for _ in $(seq 1 100); do [ -e reading ] && break; sleep 0.1; done
[ -e reading ] || fail "the h5py reader did not start"
"$remat" matrix --preset tiny --layers 4 --strategies full --steps 1 --out both.h5 >a.txt 2>&1 ||
  fail "an append while another process reads the file: $(tail -1 a.txt)"
kill $reader 2>/dev/null
wait $reader 2>/dev/null

finish cli
