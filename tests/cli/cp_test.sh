#!/usr/bin/env bash
# Context parallelism over 2 and 4 ranks (docs/scale-out.md), every zoo
# model: `mpirun -n N remat grads --cp N` gives the whole model's loss and gradients within
# float32 tolerance of one process (the ring's online softmax adds the keys'
# parts in another order); every exact strategy stays bitwise `full` under
# the split, at fp32 and bf16; each rank's measured activation and offload
# peaks, and the bytes it sends, are what `estimate --cp N` says; training
# under --cp (with data parallelism too) follows one process and resumes
# bitwise after a kill; bad layouts are refused in one line.
#   cp_test.sh path/to/remat path/to/mpiexec
set -uo pipefail
source "$(dirname "$0")/lib.sh"
mpi_test_start "$@"

# One rank's line "rank R: activation peak A bytes, offload peak O bytes" against the estimate's JSON.
checked_as_estimated() {  # checked_as_estimated WHAT (check.json: check --json's; est.json: estimate --json's)
  # Every exact strategy bitwise full (revformer's reversible rebuilds inputs by subtraction: not exact, with or
  # without the split), and each strategy estimated there at the measured activation and offload peaks.
  py check.json est.json <<'PY' || fail "$1: not bitwise, or a peak not the estimate's: $(head -c 300 check.json)"
import sys, json
check, est = json.load(open(sys.argv[1])), {r["strategy"]: r for r in json.load(open(sys.argv[2]))}
assert check["not_bitwise_exact"] == 0 and all(r["bitwise"] or not r["exact"] for r in check["strategies"])
matched = [r for r in check["strategies"] if r["strategy"] in est]
for r in matched:
    e = est[r["strategy"]]
    assert (r["activation_peak_bytes"], r["offload_peak_bytes"]) == (e["activation_peak_bytes"], e["offload_peak_bytes"]), r["strategy"]
assert len(matched) >= 7
PY
}
peaks_match() {  # peaks_match WHAT ESTIMATE.json STRATEGY (out.txt: grads --cp's)
  py "$@" out.txt <<'PY'
import sys, json, re
what, est, strategy, out = sys.argv[1:]
row = next(r for r in json.load(open(est)) if r["strategy"] == strategy)
text = open(out).read()
ranks = re.findall(r"rank \d+: activation peak (\d+) bytes, offload peak (\d+) bytes", text)
assert ranks, text
for act, off in ranks:
    assert int(act) == row["activation_peak_bytes"], (what, act, row["activation_peak_bytes"])
    assert int(off) == row["offload_peak_bytes"], (what, off, row["offload_peak_bytes"])
sent = int(re.search(r"sent (\d+) bytes", text).group(1))
assert sent == row["comm_bytes"], (what, sent, row["comm_bytes"])
PY
}

# gpt2 and llama every run, and one of the other four (bidirectional bert, encdec's encoder, decoder and
# cross-attention, parallel, reversible revformer; lib.sh's `sample`).
sample others 1 bert encdec parallel revformer
for model in gpt2 llama "${others[@]}"; do
  "$remat" export --model "$model" --preset tiny --out "$model.h5" >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
  sample precisions 1 fp32 bf16  # one of the two a run, for each model (lib.sh's `sample`)
  for precision in "${precisions[@]}"; do
    tol=1e-5
    [ "$precision" = bf16 ] && tol=2e-2  # the ring merges partial outputs rounded to bf16
    expect_ok "$model grads $precision, one process" "$remat" grads --weights "$model.h5" --precision "$precision" \
      --out one.h5
    # 1. The whole model's loss and gradients from 2 ranks (and 4: eight chunks of 2 positions).
    layouts=("2")
    [ "$model" = llama ] && [ "$precision" = fp32 ] && layouts=("2" "4")
    for n in "${layouts[@]}"; do
      launch=("${mpi[@]}")
      [ "$n" = 4 ] && launch=("${mpi4[@]}")
      expect_ok "$model grads --cp $n $precision" "${launch[@]}" "$remat" grads --weights "$model.h5" --cp "$n" \
        --precision "$precision" --out "cp$n.h5"
      [ "$(grep -c '^loss' out.txt)" -eq 1 ] || fail "$model: more than one rank printed: $(cat out.txt)"
      close_grads one.h5 "cp$n.h5" "$tol" || fail "$model --cp $n $precision: gradients differ from one process's"
      "$remat" estimate --model "$model" --preset tiny --cp "$n" --precision "$precision" --strategies full --json \
        >est.json 2>err.txt || fail "estimate --cp $n: $(cat err.txt)"
      "${launch[@]}" "$remat" grads --weights "$model.h5" --cp "$n" --precision "$precision" >out.txt 2>err.txt
      peaks_match "$model --cp $n $precision full" est.json full || fail "$model --cp $n $precision: peaks differ from the estimate"
    done
    # 2. Every strategy bitwise full under the split (check compares each rank's gradients with full's), each
    # fixed one's measured peaks those estimate --cp gives.
    expect_ok "$model check --cp 2 $precision" "${mpi[@]}" "$remat" check --model "$model" --cp 2 \
      --precision "$precision" --strategies all,budget:min --json
    cp out.txt check.json
    "$remat" estimate --model "$model" --preset tiny --cp 2 --precision "$precision" --strategies all --json \
      >est.json 2>err.txt || fail "estimate --cp 2 strategies: $(cat err.txt)"
    checked_as_estimated "$model check --cp 2 $precision"
  done
done

expect_ok "time --cp 2" "${mpi[@]}" "$remat" time --model llama --preset tiny --cp 2 --steps 1 --warmup 0
grep -q "context-parallel over 2 ranks" out.txt || fail "time --cp 2 does not say its layout: $(cat out.txt)"
# On 4 ranks, two context groups beside each other are data-parallel, each on its own sequence: every strategy
# bitwise full on their averaged gradients, each rank's peaks the estimate's at one sequence.
"${mpi4[@]}" "$remat" check --model llama --cp 2 --strategies all --json >check.json 2>err.txt ||
  fail "check --cp 2 on 4 ranks: $(cat err.txt)"
OMP_NUM_THREADS=1 "$remat" estimate --model llama --preset tiny --cp 2 --batch 1 --strategies all --json >est.json \
  2>err.txt || fail "estimate --cp 2 --batch 1: $(cat err.txt)"
py check.json est.json <<'PY' || fail "check --cp 2 on 4 ranks: not bitwise, or not the estimate"
import sys, json
check, est = json.load(open(sys.argv[1])), {r["strategy"]: r["activation_peak_bytes"] for r in json.load(open(sys.argv[2]))}
assert check["not_bitwise_exact"] == 0 and check["sizes"]["B"] == 1, check["sizes"]
assert {r["strategy"]: r["activation_peak_bytes"] for r in check["strategies"]} == est
PY

# 3. Training: --cp 2 follows one process's run within float32 rounding, and 2 context groups training
# data-parallel (4 ranks) are --cp 2 accumulating their micro-batches, bitwise; communication as predicted;
# the held-out loss, each rank evaluating its own rows, is one process's within float32 rounding; a killed
# --cp run resumes bitwise.
T=(train --model llama --preset tiny --data copy --lr 3e-3 --grad-clip 1 --strategy selective --steps 6 --eval-every 3)
expect_ok "train, one process" "$remat" "${T[@]}" --accumulate 2 --out one-run.h5
expect_ok "train --cp 2" "${mpi[@]}" "$remat" "${T[@]}" --accumulate 2 --cp 2 --out cp-run.h5
expect_ok "train --cp 2 x 2" "${mpi4[@]}" "$remat" "${T[@]}" --cp 2 --out cpdp-run.h5
same_run cp-run.h5 cpdp-run.h5 || fail "train --cp 2 over 4 ranks is not --cp 2 accumulating 2"
py one-run.h5 cp-run.h5 cpdp-run.h5 <<'PY' || fail "train --cp 2 strays from one process's run"
import sys, h5py, numpy as np
one, cp, cpdp = (h5py.File(p) for p in sys.argv[1:])
assert np.allclose(one["history/loss"][:], cp["history/loss"][:], rtol=1e-6, atol=0)
assert len(cp["history/eval_loss"]) == 2, cp["history/eval_loss"][:]
assert np.allclose(one["history/eval_loss"][:], cp["history/eval_loss"][:], rtol=1e-6, atol=0)
assert cp["history/eval_loss"][:].tobytes() == cpdp["history/eval_loss"][:].tobytes()
for n in one["params"]:
    a, b = one["params"][n][:], cp["params"][n][:]
    assert np.abs(a - b).max() <= 1e-4 * max(np.abs(a).max(), 1e-6), n
sent, predicted = cp["history/comm_bytes"][:], cp["history/predicted_comm_bytes"][:]
assert (sent > 0).all() and (sent == predicted).all(), (sent[:3], predicted[:3])
PY
# With dropout: each rank draws its own masks (the ring's per chunk pair), the same again after a resume.
K=(train --model llama --preset small --layers 2 --seq 128 --lr 3e-3 --data copy --cp 2 --strategy per-layer --steps 30
   --save-every 2 --dropout 0.1)
"${mpi[@]}" "$remat" "${K[@]}" --out whole-run.h5 >/dev/null 2>err.txt || fail "train --cp 2: $(cat err.txt)"
cut_at_first_save cut-run.h5 "${mpi[@]}" "$remat" "${K[@]}" --out cut-run.h5
expect_ok "train --cp 2 --resume" "${mpi[@]}" "$remat" "${K[@]}" --out cut-run.h5 --resume
grep -Eq "resuming cut-run.h5 at step ([1-9]|[12][0-9]) of 30" out.txt || fail "the killed run did not resume mid-way: $(cat out.txt)"
same_run whole-run.h5 cut-run.h5 || fail "train --cp 2, killed and resumed, is not the run left alone"
# ZeRO-3 beside --cp: two context groups on 4 ranks, their replicas sharded over the data group (each context
# rank sums its shards' gradients over its group), bitwise the one group accumulating the same two
# micro-batches; what each rank holds is what estimate says.
expect_ok "train --cp 2 --shard-params on 4" "${mpi4[@]}" "$remat" "${T[@]}" --cp 2 --shard-params --out cpzero-run.h5
OMP_NUM_THREADS=1 "$remat" estimate --model llama --preset tiny --cp 2 --ranks 2 --shard-params --strategies selective \
  --json >est.json 2>err.txt || fail "estimate --cp 2 --shard-params: $(cat err.txt)"
py cp-run.h5 cpzero-run.h5 est.json <<'PY' || fail "train --cp 2 --shard-params is not the group accumulating, or not the estimate"
import sys, json, h5py
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
for key in ("loss", "grad_norm"):
    assert a["history"][key][:].tobytes() == b["history"][key][:].tobytes(), key
for n in a["params"]:
    assert a["params"][n][:].tobytes() == b["params"][n][:].tobytes(), n
PY
state_as_estimated cpzero-run.h5 est.json || fail "train --cp 2 --shard-params holds or sends other than estimated"

# Dropout under --cp: each rank's masks its own (elementwise by the rank's streams, the ring's per chunk
# pair), so not one process's run, but every strategy bitwise full at the layout and each rank's peaks the
# estimate's, on a causal and a bidirectional model.
for model in llama bert; do
  expect_ok "$model check --cp 2 --dropout 0.1" "${mpi[@]}" "$remat" check --model "$model" --cp 2 --dropout 0.1 \
    --strategies all,budget:min --json
  cp out.txt check.json
  "$remat" estimate --model "$model" --preset tiny --cp 2 --dropout 0.1 --strategies all --json >est.json 2>err.txt ||
    fail "estimate --cp 2 --dropout: $(cat err.txt)"
  checked_as_estimated "$model check --cp 2 --dropout 0.1"
done

# LoRA and QLoRA under --cp: every rank holds the whole model, its adapters and quantized weights too, and
# sums the adapters' gradients over the group. grads is one process's (fp32 within 1e-5; nf4 computes in
# bf16: 2e-2), every strategy bitwise full, each rank's peak the estimate's, and a QLoRA training follows
# one process's losses.
expect_ok "grads --lora 4, one process" "$remat" grads --weights llama.h5 --lora 4 --out one-lora.h5
expect_ok "grads --cp 2 --lora 4" "${mpi[@]}" "$remat" grads --weights llama.h5 --lora 4 --cp 2 --out cp-lora.h5
close_grads one-lora.h5 cp-lora.h5 1e-5 || fail "--cp 2 --lora 4: gradients differ from one process's"
expect_ok "grads --lora 4 --quantize nf4, one process" "$remat" grads --weights llama.h5 --lora 4 --quantize nf4 \
  --out one-qlora.h5
expect_ok "grads --cp 2 --lora 4 --quantize nf4" "${mpi[@]}" "$remat" grads --weights llama.h5 --lora 4 \
  --quantize nf4 --cp 2 --out cp-qlora.h5
close_grads one-qlora.h5 cp-qlora.h5 2e-2 || fail "--cp 2 QLoRA: gradients differ from one process's"
expect_ok "check --cp 2 QLoRA" "${mpi[@]}" "$remat" check --model llama --cp 2 --lora 4 --quantize nf4 \
  --strategies all,budget:min --json
cp out.txt check.json
"$remat" estimate --model llama --preset tiny --cp 2 --lora 4 --quantize nf4 --strategies all --json >est.json \
  2>err.txt || fail "estimate --cp 2 QLoRA: $(cat err.txt)"
checked_as_estimated "check --cp 2 QLoRA"
Q=(train --model llama --preset tiny --lora 4 --quantize nf4 --steps 4)
expect_ok "QLoRA train, one process" "$remat" "${Q[@]}" --out one-q.h5
expect_ok "QLoRA train --cp 2" "${mpi[@]}" "$remat" "${Q[@]}" --cp 2 --out cp-q.h5
py one-q.h5 cp-q.h5 <<'PY' || fail "QLoRA train --cp 2 does not follow one process"
import sys, h5py, numpy as np
one, cp = (h5py.File(p) for p in sys.argv[1:])
assert np.allclose(one["history/loss"][:], cp["history/loss"][:], rtol=1e-4, atol=0)
PY

# --freeze under --cp: every rank freezes the same parameters (each holds them all). The gradients are one
# process's (the frozen ones absent from both files), every strategy is bitwise full, each rank's peaks and
# bytes sent are the estimate's, and a training follows one process's, its frozen weights bitwise.
expect_ok "grads --freeze-below 1" "$remat" grads --weights llama.h5 --freeze-below 1 --out one-frozen.h5
expect_ok "grads --cp 2 --freeze-below 1" "${mpi[@]}" "$remat" grads --weights llama.h5 --cp 2 --freeze-below 1 \
  --out cp-frozen.h5
"$remat" estimate --model llama --preset tiny --cp 2 --freeze-below 1 --strategies all --json >est.json 2>err.txt ||
  fail "estimate --cp 2 --freeze-below 1: $(cat err.txt)"
peaks_match "llama --cp 2 --freeze-below 1" est.json full || fail "--cp 2 --freeze-below 1: peaks differ from the estimate"
close_grads one-frozen.h5 cp-frozen.h5 1e-5 || fail "--cp 2 --freeze-below 1: gradients differ from one process's"
py -c "import h5py; g = h5py.File('cp-frozen.h5')['grads']; assert len(g) == 11 and not any(n.startswith('layers.0.') for n in g), list(g)" ||
  fail "--cp 2 --freeze-below 1 wrote gradients of frozen parameters"
"${mpi[@]}" "$remat" check --model llama --cp 2 --freeze-below 1 --strategies all --json >check.json 2>err.txt ||
  fail "check --cp 2 --freeze-below 1: $(cat err.txt)"
checked_as_estimated "check --cp 2 --freeze-below 1"
expect_ok "train --freeze-below 1" "$remat" "${T[@]}" --accumulate 2 --freeze-below 1 --out one-frozen-run.h5
expect_ok "train --cp 2 --freeze-below 1" "${mpi[@]}" "$remat" "${T[@]}" --accumulate 2 --cp 2 --freeze-below 1 \
  --out cp-frozen-run.h5
py one-frozen-run.h5 cp-frozen-run.h5 <<'PY' || fail "train --cp 2 --freeze-below 1 strays from one process's run"
import sys, h5py, numpy as np
one, cp = (h5py.File(p) for p in sys.argv[1:])
assert np.allclose(one["history/loss"][:], cp["history/loss"][:], rtol=1e-6, atol=0)
assert sorted(one["optimizer/m"]) == sorted(cp["optimizer/m"]) and "tok_embeddings.weight" not in cp["optimizer/m"]
for n in one["params"]:
    a, b = one["params"][n][:], cp["params"][n][:]
    if n.startswith(("layers.0.", "tok_embeddings.")):
        assert a.tobytes() == b.tobytes(), n
    assert np.abs(a - b).max() <= 1e-4 * max(np.abs(a).max(), 1e-6), n
sent, predicted = cp["history/comm_bytes"][:], cp["history/predicted_comm_bytes"][:]
assert (sent > 0).all() and (sent == predicted).all(), (sent[:3], predicted[:3])
PY

# mixtral: each rank's loss is its rows' share of the cross-entropy and 1/N of the load-balancing loss of the
# router's whole-sequence sums (gathered by an op whose backward sums every rank's share). At --router-aux 1 the
# gradients are one process's at 2 and 4 ranks; every strategy bitwise full with each rank's peaks the
# estimate's; a training follows one process's losses, loss parts and expert loads.
"$remat" export --model mixtral --preset tiny --out mixtral.h5 >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
expect_ok "mixtral grads, one process" "$remat" grads --weights mixtral.h5 --router-aux 1 --out one.h5
for n in 2 4; do
  launch=("${mpi[@]}")
  [ "$n" = 4 ] && launch=("${mpi4[@]}")
  expect_ok "mixtral grads --cp $n" "${launch[@]}" "$remat" grads --weights mixtral.h5 --router-aux 1 --cp "$n" --out "cp$n.h5"
  close_grads one.h5 "cp$n.h5" 1e-5 || fail "mixtral --cp $n: gradients differ from one process's"
done
"${mpi[@]}" "$remat" check --model mixtral --cp 2 --strategies all --json >check.json 2>err.txt ||
  fail "mixtral check --cp 2: $(cat err.txt)"
OMP_NUM_THREADS=1 "$remat" estimate --model mixtral --preset tiny --cp 2 --strategies all --json >est.json 2>err.txt ||
  fail "estimate mixtral --cp 2: $(cat err.txt)"
py check.json est.json <<'PY' || fail "mixtral check --cp 2: not bitwise, or not the estimate"
import sys, json
check, est = json.load(open(sys.argv[1])), {r["strategy"]: r for r in json.load(open(sys.argv[2]))}
assert check["not_bitwise_exact"] == 0
for r in check["strategies"]:
    e = est[r["strategy"]]
    assert (r["activation_peak_bytes"], r["offload_peak_bytes"]) == (e["activation_peak_bytes"], e["offload_peak_bytes"]), r["strategy"]
PY
X=(train --model mixtral --preset tiny --data copy --lr 3e-3 --steps 10 --accumulate 2)
expect_ok "mixtral train, one process" "$remat" "${X[@]}" --out mixtral-one.h5
expect_ok "mixtral train --cp 2" "${mpi[@]}" "$remat" "${X[@]}" --cp 2 --out mixtral-cp.h5
py mixtral-one.h5 mixtral-cp.h5 <<'PY' || fail "mixtral train --cp 2 strays from one process's run"
import sys, h5py, numpy as np
one, cp = (h5py.File(p) for p in sys.argv[1:])
assert np.allclose(one["history/loss"][:], cp["history/loss"][:], rtol=1e-6, atol=0)
for part in ("ce", "aux"):  # the group's sums, not rank 0's share
    assert np.allclose(one["history/loss_parts"][part][:], cp["history/loss_parts"][part][:], rtol=1e-6, atol=0), part
assert (one["history/stats/expert_load"][:] == cp["history/stats/expert_load"][:]).all()
sent, predicted = cp["history/comm_bytes"][:], cp["history/predicted_comm_bytes"][:]
assert (sent > 0).all() and (sent == predicted).all(), (sent[:3], predicted[:3])
PY

# 4. Bad layouts, one line each, before anything runs (estimate takes --cp beside --pp: shape-only).
expect_error "must be divisible by 6" "$remat" estimate --model llama --preset tiny --cp 3
expect_error "must be divisible by 6" "$remat" grads --weights llama.h5 --cp 3
expect_error "--tp 2 --cp 2 runs on a multiple of 4 ranks" "$remat" grads --weights llama.h5 --cp 2 --tp 2
expect_ok "estimate --cp 2 --pp 2" "$remat" estimate --model llama --preset tiny --cp 2 --pp 2 --strategies full
grep -q "context-parallel 2" out.txt || fail "estimate --cp 2 --pp 2 does not name the layout: $(cat out.txt)"
expect_error "--pp or --micro-batches with --tp, --sp, --ep or --cp: not yet" "$remat" grads --weights llama.h5 --cp 2 --pp 2
expect_error "runs on a multiple of 2 ranks" "$remat" grads --weights llama.h5 --cp 2
expect_error "--attention plain with --cp: not yet" "$remat" estimate --model llama --preset tiny --cp 2 --attention plain
# The run file records the layout: resumed without --cp on as many data-parallel ranks, refused in one line.
expect_ok "train --cp 2 on 4" "${mpi4[@]}" "$remat" train --model llama --preset tiny --cp 2 --steps 1 --out cp-layout.h5
"${mpi[@]}" "$remat" train --model llama --preset tiny --steps 1 --out cp-layout.h5 --resume >out.txt 2>err.txt
[ $? -eq 2 ] && grep -q "was trained with context_parallel cp=2, this run asks for cp=1" err.txt ||
  fail "a --cp run resumed without --cp: $(cat err.txt)"
finish cp_test
