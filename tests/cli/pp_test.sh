#!/usr/bin/env bash
# Pipeline parallelism over 2 and 4 ranks (docs/scale-out.md): `mpirun -n N
# remat grads --pp N --micro-batches M` gives the mean loss and gradients of
# one process accumulating the same M micro-batches (`grads --micro-batches
# M`), bitwise, under every schedule and strategy (gpt2's tied embedding,
# whose two parts the first and last stage hold apart, to rounding); each
# stage's measured activation and offload peaks are what `estimate --pp`
# says for it; training follows one process's trajectory bitwise, beside
# data parallelism too, and resumes bitwise after a kill; bad layouts are
# refused in one line.
#   pp_test.sh path/to/remat path/to/mpiexec
set -uo pipefail
source "$(dirname "$0")/lib.sh"
mpi_test_start "$@"

# same_grads A B [TIED]: /loss and every gradient bitwise; TIED (a name) to float32 rounding.
same_grads() {
  py "$@" <<'PY' || fail "grads differ: $*"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
tied = sys.argv[3] if len(sys.argv) > 3 else None
assert a["loss"][()] == b["loss"][()], (a["loss"][()], b["loss"][()])
assert sorted(a["grads"]) == sorted(b["grads"])
for k in a["grads"]:
    x, y = a["grads"][k][:], b["grads"][k][:]
    if k == tied:
        assert np.abs(x - y).max() <= 1e-6 * np.abs(x).max(), k
    else:
        assert np.array_equal(x, y), k
PY
}

# same_peaks: each stage's measured peaks (out.txt) are estimate.json's rows, in order.
same_peaks() {
  py "$1" <<'PY' || fail "stage peaks differ from the estimate: $1"
import json, re, sys
est = [(e["activation_peak_bytes"], e["offload_peak_bytes"]) for e in json.load(open("estimate.json"))]
got = [tuple(map(int, m.groups())) for m in
       (re.search(r"activation peak (\d+) bytes, offload peak (\d+)", l) for l in open("out.txt")) if m]
assert got == est, (got, est)
PY
}

for model in llama gpt2 mixtral encdec; do
  "$remat" export --model "$model" --preset tiny --layers 4 --out "$model.h5" >/dev/null 2>err.txt ||
    fail "export: $(cat err.txt)"
  tied=""
  strategies=(full per-layer selective offload-checkpoint)
  layouts=("2 gpipe" "2 1f1b" "2 interleaved:2" "4 1f1b" "2 zb-h1" "4 zb-h1")
  # gpt2 differs from llama in its tied embedding alone: fewer combinations (tests/test_pipeline.cpp has them all).
  [ "$model" = gpt2 ] && tied=wte.weight strategies=(full offload-checkpoint) layouts=("2 1f1b" "2 interleaved:2" "2 zb-h1")
  # mixtral hands its router's sums and counts on beside the residual stream.
  [ "$model" = mixtral ] && strategies=(full selective) layouts=("2 1f1b" "4 zb-h1")
  # encdec: its encoder's output crosses the decoder's stages beside their stream; its tied embedding is read on
  # three stages (the encoder's embedding, the decoder's, the head).
  [ "$model" = encdec ] && tied=wte.weight strategies=(full per-layer) layouts=("2 interleaved:2" "4 zb-h1")
  for strategy in "${strategies[@]}"; do
    expect_ok "$model $strategy accumulated" "$remat" grads --weights "$model.h5" --micro-batches 4 \
      --strategy "$strategy" --out one.h5
    for layout in "${layouts[@]}"; do
      read -r ranks schedule <<<"$layout"
      launch=("${mpi[@]}")
      [ "$ranks" = 4 ] && launch=("${mpi4[@]}")
      pp=(--pp "$ranks" --micro-batches 4 --schedule "$schedule")
      expect_ok "$model $strategy $layout" "${launch[@]}" "$remat" grads --weights "$model.h5" "${pp[@]}" \
        --strategy "$strategy" --out pp.h5
      same_grads one.h5 pp.h5 $tied
      # Each stage's peaks: measured on its rank, as the shape-only estimate says.
      "$remat" estimate --model "$model" --preset tiny --layers 4 --seq 16 --batch 2 "${pp[@]}" \
        --strategies "$strategy" --json >estimate.json 2>err.txt || fail "estimate ${pp[*]}: $(cat err.txt)"
      same_peaks "$model $strategy $layout"
    done
  done
done

# An uneven split, at bf16.
"$remat" export --model llama --preset tiny --layers 5 --out llama5.h5 >/dev/null
uneven=(--pp 2 --micro-batches 3 --stage-layers 2,3 --precision bf16 --strategy per-layer)
expect_ok "uneven" "$remat" grads --weights llama5.h5 --micro-batches 3 --precision bf16 --strategy per-layer \
  --out one.h5
expect_ok "uneven, pipelined" "${mpi[@]}" "$remat" grads --weights llama5.h5 "${uneven[@]}" --out pp.h5
same_grads one.h5 pp.h5
"$remat" estimate --model llama --preset tiny --layers 5 --seq 16 --batch 2 --pp 2 --micro-batches 3 \
  --stage-layers 2,3 --precision bf16 --strategies per-layer --json >estimate.json 2>err.txt ||
  fail "estimate uneven: $(cat err.txt)"
same_peaks "uneven"
grep -q "^stage 1: layers 2-4," out.txt || fail "stage 1 does not say its layers: $(cat out.txt)"

# Training: 2 stages follow one process accumulating the same micro-batches bitwise (losses, weights,
# optimizer state), under gpipe, zb-h1, 1f1b and interleaved 1f1b (each rank's chunks' gradients folded in
# as their backward passes end; under zb-h1 as their W passes end); 2 stages x 2 data-parallel pipelines
# (4 ranks) one process accumulating all 8; communication as predicted; a killed pipelined run resumes bitwise.
T=(train --model llama --preset tiny --layers 4 --data copy --lr 3e-3 --grad-clip 1 --strategy per-layer --steps 6)
expect_ok "train, one process" "$remat" "${T[@]}" --accumulate 4 --out one-run.h5
for schedule in gpipe interleaved:2 zb-h1 1f1b; do  # (1f1b's pp-run.h5 stays, for the report below)
  expect_ok "train --pp 2 $schedule" "${mpi[@]}" "$remat" "${T[@]}" --accumulate 4 --pp 2 --pp-schedule "$schedule" \
    --out pp-run.h5 --force
  same_run one-run.h5 pp-run.h5 || fail "train --pp 2 --pp-schedule $schedule is not one process's run"
  [ "$schedule" = zb-h1 ] && cp pp-run.h5 zb-run.h5
done
# mixtral: the router's sums and counts between the stages too (its load-balancing loss on the last).
X=(train --model mixtral --preset tiny --layers 4 --data copy --lr 3e-3 --strategy selective --steps 4 --accumulate 4)
expect_ok "train mixtral, one process" "$remat" "${X[@]}" --out one-moe.h5
expect_ok "train mixtral --pp 2 zb-h1" "${mpi[@]}" "$remat" "${X[@]}" --pp 2 --pp-schedule zb-h1 --out pp-moe.h5
same_run one-moe.h5 pp-moe.h5 || fail "train mixtral --pp 2 --pp-schedule zb-h1 is not one process's run"
# Its loss parts and expert loads, which the last stage computes, recorded as one process records them.
py one-moe.h5 pp-moe.h5 <<'PY' || fail "train mixtral --pp 2: loss parts, statistics or communication"
import sys, h5py, numpy as np
a, b = (h5py.File(f)["history"] for f in sys.argv[1:3])
for group in ("loss_parts", "stats"):
    assert sorted(a[group]) == sorted(b[group]) and a[group], (group, list(a[group]), list(b[group]))
    for k in a[group]:
        assert np.array_equal(a[group][k][:], b[group][k][:]), (group, k)
assert (b["comm_bytes"][:] == b["predicted_comm_bytes"][:]).all()
PY
# encdec interleaved: the encoder's final norm and the decoder's embedding run on a middle chunk (its gradient
# round folds what that chunk reads), and one rank's two chunks read the tied embedding (folded once a
# micro-batch, exchanged once with the other pipeline as predicted); its three parts summed over the ranks, so
# the run follows one process to rounding: losses and weights.
E=(train --model encdec --preset tiny --layers 4 --data copy --lr 3e-3 --strategy per-layer --steps 6)
expect_ok "train encdec, one process" "$remat" "${E[@]}" --accumulate 4 --out one-encdec.h5
expect_ok "train encdec --pp 2 interleaved" "${mpi[@]}" "$remat" "${E[@]}" --accumulate 4 --pp 2 \
  --pp-schedule interleaved:2 --out pp-encdec.h5
expect_ok "train encdec --pp 2 x 2 interleaved" "${mpi4[@]}" "$remat" "${E[@]}" --accumulate 2 --pp 2 \
  --pp-schedule interleaved:2 --out ppdp-encdec.h5
for run in pp-encdec.h5 ppdp-encdec.h5; do
  py one-encdec.h5 "$run" <<'PY' || fail "train encdec --pp 2 interleaved:2 ($run) does not follow one process"
import sys, h5py, numpy as np
a, b = (h5py.File(f) for f in sys.argv[1:3])
assert np.abs(a["history/loss"][:] - b["history/loss"][:]).max() <= 1e-5, (a["history/loss"][:], b["history/loss"][:])
for k in a["params"]:  # (Adam turns the tied sum's rounding into about 1e-6 on the small biases in 6 steps)
    x, y = a["params"][k][:], b["params"][k][:]
    assert np.abs(x - y).max() <= 1e-5 * max(np.abs(x).max(), 1.0), k
sent, predicted = b["history/comm_bytes"][:], b["history/predicted_comm_bytes"][:]
assert (sent == predicted).all(), (sent, predicted)
PY
done
# With dropout each stage draws what the one process draws: each micro-batch its own step (beside data
# parallelism, the step's micro-batch it is), from where that process's forward is in its count of random ops.
D=("${T[@]}" --dropout 0.1)
expect_ok "train, one process, dropout" "$remat" "${D[@]}" --accumulate 4 --out one-drop.h5
expect_ok "train --pp 2, dropout" "${mpi[@]}" "$remat" "${D[@]}" --accumulate 4 --pp 2 --out pp-drop.h5
same_run one-drop.h5 pp-drop.h5 || fail "train --pp 2 with dropout is not one process's run"
expect_ok "train, one process, 8, dropout" "$remat" "${D[@]}" --accumulate 8 --out acc-drop.h5
expect_ok "train --pp 2 x 2, dropout" "${mpi4[@]}" "$remat" "${D[@]}" --accumulate 4 --pp 2 --pp-schedule interleaved:2 \
  --out ppdp-drop.h5
same_run acc-drop.h5 ppdp-drop.h5 || fail "train --pp 2 over 4 ranks with dropout is not one process accumulating 8"
expect_ok "train, one process, 8" "$remat" "${T[@]}" --accumulate 8 --out acc-run.h5
expect_ok "train --pp 2 x 2" "${mpi4[@]}" "$remat" "${T[@]}" --accumulate 4 --pp 2 --out ppdp-run.h5
same_run acc-run.h5 ppdp-run.h5 || fail "train --pp 2 over 4 ranks is not one process accumulating 8"
for run in pp-run.h5 ppdp-run.h5 ppdp-drop.h5; do
  py -c 'import sys, h5py
h = h5py.File(sys.argv[1])
sent, predicted = h["history/comm_bytes"][:], h["history/predicted_comm_bytes"][:]
assert (sent > 0).all() and (sent == predicted).all(), (sent[:3], predicted[:3])' "$run" ||
    fail "$run: communication not as predicted"
done
# The run file keeps the last step's passes per stage; report draws them and gives the measured bubble;
# the recorded activation peak (rank 0's: stage 0) is estimate --pp's for stage 0.
"$remat" estimate --model llama --preset tiny --layers 4 --seq 16 --batch 2 --pp 2 --micro-batches 4 \
  --strategies per-layer --json >estimate.json 2>err.txt || fail "estimate: $(cat err.txt)"
expect_ok "report of a pipelined run" "$remat" report pp-run.h5 --svg plots
grep -q "pipelined over 2 stages, 4 micro-batches; the last step's bubble .* measured [0-9.]*%, against (p-1)/(M+p-1) = 20.0%" \
  out.txt || fail "report gives no measured bubble: $(cat out.txt)"
py pp-run.h5 plots/pipeline.svg <<'PY' || fail "pipeline/passes or pipeline.svg"
import sys, json, h5py, xml.etree.ElementTree as E
run = h5py.File(sys.argv[1])
passes = run["pipeline/passes"][:]
assert passes.shape == (2, 8, 7), passes.shape
for stage in passes:
    assert sorted(stage[:, 0].tolist()) == [0] * 4 + [1] * 4  # 4 forwards, 4 backwards
    assert (stage[:, 4] >= stage[:, 3]).all() and (stage[1:, 3] >= stage[:-1, 4] - 1e-9).all()  # in order
estimate = json.load(open("estimate.json"))
assert (run["history/activation_peak"][:] == estimate[0]["activation_peak_bytes"]).all()
boxes = [e for e in E.parse(sys.argv[2]).getroot() if e.tag.endswith("rect") and e.get("height") == "28.00"]
assert len(boxes) == 16, len(boxes)
PY
# zb-h1's passes: each stage's 4 forwards, 4 B and 4 W passes (the last stage's W a micro-batch behind its B),
# drawn as 24 boxes.
expect_ok "report of a zb-h1 run" "$remat" report zb-run.h5 --svg zb-plots
grep -q "measured [0-9.]*%, against (p-1)/(3M+p-1) = 7.7%" out.txt || fail "zb-h1's report: $(cat out.txt)"
py zb-run.h5 zb-plots/pipeline.svg <<'PY' || fail "zb-h1's pipeline/passes or pipeline.svg"
import sys, h5py, xml.etree.ElementTree as E
passes = h5py.File(sys.argv[1])["pipeline/passes"][:]
assert passes.shape == (2, 12, 7), passes.shape
for stage in passes:
    assert sorted(stage[:, 0].tolist()) == [0] * 4 + [1] * 4 + [2] * 4
assert passes[1][:, :2].tolist()[:5] == [[0, 0], [1, 0], [0, 1], [1, 1], [2, 0]], passes[1][:, :2]  # F0 B0 F1 B1 W0
boxes = [e for e in E.parse(sys.argv[2]).getroot() if e.tag.endswith("rect") and e.get("height") == "28.00"]
assert len(boxes) == 24, len(boxes)
PY
K=(train --model llama --preset small --layers 4 --seq 64 --lr 3e-3 --data copy --pp 2 --accumulate 2
   --strategy per-layer --steps 10 --save-every 2)
"${mpi[@]}" "$remat" "${K[@]}" --out whole-run.h5 >/dev/null 2>err.txt || fail "train --pp 2: $(cat err.txt)"
# Fine-tuning across stages: frozen blocks (the first stage, all frozen, runs no backward), LoRA adapters and a quantized base, each stage reading its own; bitwise one process accumulating the
# same micro-batches, each stage's peaks the estimate's.
for ft in "--freeze-below 2" "--lora 2 --quantize int8" "--freeze-below 1 --quantize nf4 --precision fp32"; do
  # shellcheck disable=SC2206  # the options' words, as a user types them
  f=($ft)
  expect_ok "llama $ft accumulated" "$remat" grads --weights llama.h5 --micro-batches 2 "${f[@]}" \
    --strategy per-layer --out one.h5
  expect_ok "llama $ft --pp 2" "${mpi[@]}" "$remat" grads --weights llama.h5 --pp 2 --micro-batches 2 "${f[@]}" \
    --strategy per-layer --out pp.h5
  same_grads one.h5 pp.h5
  "$remat" estimate --model llama --preset tiny --layers 4 --pp 2 --micro-batches 2 "${f[@]}" --strategies per-layer \
    --json >estimate.json 2>err.txt || fail "estimate --pp 2 $ft: $(cat err.txt)"
  same_peaks "llama $ft --pp 2"
done
# Training under it: frozen blocks, and LoRA on a quantized base, follow one process accumulating the same
# micro-batches bitwise under zb-h1 and interleaved 1F1B (communication as predicted); a killed QLoRA pipeline
# resumes bitwise.
Q=(train --model llama --preset tiny --layers 4 --data copy --lr 3e-3 --steps 4 --accumulate 4)
for ft in "--freeze-below 2" "--lora 2 --quantize nf4 --precision fp32"; do
  # shellcheck disable=SC2206
  f=($ft)
  expect_ok "train $ft, one process" "$remat" "${Q[@]}" "${f[@]}" --out one-ft.h5 --force
  for schedule in zb-h1 interleaved:2; do
    expect_ok "train $ft --pp 2 $schedule" "${mpi[@]}" "$remat" "${Q[@]}" "${f[@]}" --pp 2 --pp-schedule "$schedule" \
      --out pp-ft.h5 --force
    same_run one-ft.h5 pp-ft.h5 || fail "train $ft --pp 2 $schedule is not one process's run"
  done
done
QP=("${Q[@]}" --lora 2 --quantize nf4 --pp 2 --save-every 1)
expect_ok "train QLoRA --pp 2" "${mpi[@]}" "$remat" "${QP[@]}" --out q-whole.h5
cut_at_first_save q-cut.h5 "${mpi[@]}" "$remat" "${QP[@]}" --out q-cut.h5
expect_ok "train QLoRA --pp 2 --resume" "${mpi[@]}" "$remat" "${QP[@]}" --out q-cut.h5 --resume
same_run q-whole.h5 q-cut.h5 || fail "train QLoRA --pp 2, killed and resumed, is not the run left alone"
# Where a strategy does not fit on every stage, estimate --pp says at what it would: the largest B per
# micro-batch and the longest S, each checked here (B 4 fits every stage, B 5 does not).
"$remat" estimate --model llama --preset small --pp 2 --micro-batches 2 --strategies per-layer --device mem:100M \
  >out.txt 2>err.txt || fail "estimate --pp --device mem:100M: $(cat err.txt)"
grep -q "^  per-layer: at B 4 (S 256), or at S 128 (B 8)$" out.txt || fail "estimate --pp: no refit said: $(cat out.txt)"
for b in 4 5 8; do
  "$remat" estimate --model llama --preset small --pp 2 --micro-batches 2 --strategies per-layer --device mem:100M \
    --batch "$b" --json >"refit-$b.json" 2>err.txt || fail "estimate --batch $b: $(cat err.txt)"
done
py refit-4.json refit-5.json refit-8.json <<'PY' || fail "estimate --pp: the refit's B is not the largest that fits every stage"
import json, sys
four, five, eight = (json.load(open(p)) for p in sys.argv[1:])
assert all(r["headroom_bytes"] >= 0 for r in four) and any(r["headroom_bytes"] < 0 for r in five)
assert all((r["would_fit_batch"], r["would_fit_seq"]) == (4, 128) for r in eight)  # --json says it too
PY
# check and time take it too: every strategy bitwise full with each stage's peaks as predicted, on 2 stages and
# on one rank accumulating; time's stages the estimate's.
expect_ok "check --pp 2 --lora 2 --quantize int8" "${mpi[@]}" "$remat" check --model llama --preset tiny --layers 4 \
  --pp 2 --micro-batches 2 --lora 2 --quantize int8 --dropout 0.1 --strategies all
grep -q "^8 strategies: 0 failed" out.txt || fail "check --pp 2 QLoRA: $(tail -3 out.txt)"
expect_ok "check --micro-batches 2 --freeze-below 2" "$remat" check --model llama --preset tiny --layers 4 \
  --micro-batches 2 --freeze-below 2 --strategies all
grep -q "^8 strategies: 0 failed" out.txt || fail "check --micro-batches --freeze-below: $(tail -3 out.txt)"
expect_ok "time --pp 2 --freeze-below 1" "${mpi[@]}" "$remat" time --model llama --preset tiny --layers 4 --pp 2 \
  --micro-batches 2 --freeze-below 1 --strategy per-layer --steps 1 --warmup 0 --json
mv out.txt time.json
"$remat" estimate --model llama --preset tiny --layers 4 --pp 2 --micro-batches 2 --freeze-below 1 \
  --strategies per-layer --json >estimate.json 2>err.txt || fail "estimate --freeze-below 1: $(cat err.txt)"
py time.json <<'PY' || fail "time --pp 2 --freeze-below 1: its stages are not the estimate's"
import json, sys
got = [(s["activation_peak_bytes"], s["offload_peak_bytes"]) for s in json.load(open(sys.argv[1]))["stages"]]
est = [(e["activation_peak_bytes"], e["offload_peak_bytes"]) for e in json.load(open("estimate.json"))]
assert got == est, (got, est)
PY
# estimate --pp beside --ep and beside --shard-params: the stages split what the unpipelined estimate's rank holds
# (llama's parameters untied: their stages' shards add up to its shards; mixtral's experts per rank likewise).
"$remat" estimate --config llama-7b --seq 1024 --batch 1 --pp 4 --micro-batches 4 --ranks 8 --shard-params \
  --precision bf16 --strategies per-layer --device h100-80gb --json >stages.json 2>err.txt ||
  fail "estimate --pp 4 --shard-params: $(cat err.txt)"
"$remat" estimate --config llama-7b --seq 1024 --batch 1 --ranks 8 --shard-params --precision bf16 \
  --strategies per-layer --json >whole.json 2>err.txt || fail "estimate --shard-params: $(cat err.txt)"
"$remat" estimate --model mixtral --preset tiny --layers 4 --ep 2 --pp 2 --micro-batches 2 --strategies full --json \
  >ep-stages.json 2>err.txt || fail "estimate --ep 2 --pp 2: $(cat err.txt)"
"$remat" estimate --model mixtral --preset tiny --layers 4 --ep 2 --strategies full --json >ep-whole.json 2>err.txt ||
  fail "estimate --ep 2: $(cat err.txt)"
py stages.json whole.json ep-stages.json ep-whole.json <<'PY' || fail "estimate --pp: the stages do not split the state"
import json, sys
stages, whole, ep_stages, ep_whole = (json.load(open(p)) for p in sys.argv[1:])
assert len(stages) == 4 and all(s["shard_params"] and s["ranks"] == 8 for s in stages)
assert all(s["gathered_peak_bytes"] > 0 and s["reducing_peak_bytes"] > 0 for s in stages)
for k in ("parameter_bytes", "gradient_bytes", "optimizer_bytes"):
    assert sum(s[k] for s in stages) == whole[0][k], (k, [s[k] for s in stages], whole[0][k])
assert len(ep_stages) == 2 and all(s["ep"] == 2 for s in ep_stages)
assert sum(s["parameter_bytes"] for s in ep_stages) == ep_whole[0]["parameter_bytes"]
PY

cut_at_first_save cut-run.h5 "${mpi[@]}" "$remat" "${K[@]}" --out cut-run.h5
expect_ok "train --pp 2 --resume" "${mpi[@]}" "$remat" "${K[@]}" --out cut-run.h5 --resume
grep -Eq "resuming cut-run.h5 at step [1-9] of 10" out.txt || fail "the killed run did not resume mid-way: $(cat out.txt)"
same_run whole-run.h5 cut-run.h5 || fail "train --pp 2, killed and resumed, is not the run left alone"

# check --pp: every strategy bitwise full under the schedule (gpt2's tied embedding too: the same
# order of sums for all), each stage's peaks the estimate's; on one rank the accumulated micro-batches.
expect_ok "check --micro-batches, one rank" "$remat" check --model llama --preset tiny --layers 4 --micro-batches 4 \
  --dropout 0.1 --strategies all
grep -q "^8 strategies: 0 failed" out.txt || fail "check --micro-batches: $(tail -1 out.txt)"
expect_ok "check --pp 2 interleaved, gpt2 bf16" "${mpi[@]}" "$remat" check --model gpt2 --preset tiny --layers 4 --pp 2 \
  --micro-batches 4 --schedule interleaved:2 --precision bf16 --dropout 0.1 --strategies all
grep -q "^8 strategies: 0 failed" out.txt && [ "$(grep -c "^  stage" out.txt)" -eq 16 ] ||
  fail "check --pp 2: $(tail -3 out.txt)"
expect_ok "check --pp 2 zb-h1, llama bf16" "${mpi[@]}" "$remat" check --model llama --preset tiny --layers 4 --pp 2 \
  --micro-batches 4 --schedule zb-h1 --precision bf16 --dropout 0.1 --strategies all
grep -q "^8 strategies: 0 failed" out.txt || fail "check --pp 2 zb-h1: $(tail -3 out.txt)"
expect_ok "check --pp 4, llama" "${mpi4[@]}" "$remat" check --model llama --preset tiny --layers 4 --pp 4 --micro-batches 4 \
  --strategies full,per-layer,offload
grep -q "^3 strategies: 0 failed" out.txt || fail "check --pp 4: $(tail -1 out.txt)"
# time --pp: whole pipelined steps timed, each stage's peak the estimate's.
expect_ok "time --pp 2" "${mpi[@]}" "$remat" time --model llama --preset tiny --layers 4 --pp 2 --micro-batches 4 \
  --schedule gpipe --strategy offload-checkpoint --steps 2 --json
mv out.txt time.json
"$remat" estimate --model llama --preset tiny --layers 4 --pp 2 --micro-batches 4 --schedule gpipe \
  --strategies offload-checkpoint --json >estimate.json 2>err.txt || fail "estimate: $(cat err.txt)"
py time.json <<'PY' || fail "time --pp 2: its stages are not the estimate's"
import json, sys
t = json.load(open(sys.argv[1]))
est = [(e["activation_peak_bytes"], e["offload_peak_bytes"]) for e in json.load(open("estimate.json"))]
got = [(s["activation_peak_bytes"], s["offload_peak_bytes"]) for s in t["stages"]]
assert got == est and t["micro_batches"] == 4 and t["median_s"] > 0, (got, est)
PY
expect_error "--cp or a budget: not yet" "$remat" time --model llama --preset tiny --micro-batches 2 \
  --strategy budget:min
expect_error "with a budget ('budget:min'): not yet" "$remat" check --model llama --preset tiny --micro-batches 2 \
  --strategies budget:min
expect_error "--json or a golden file: not yet" "$remat" check --model llama --preset tiny --micro-batches 2 --json
expect_error "start 2 ranks" "$remat" check --model llama --preset tiny --layers 4 --pp 2 --micro-batches 2

# Bad layouts: one line, exit 2.
expect_error "does not divide the 4 layers" "$remat" estimate --model llama --preset tiny --layers 4 --pp 3
expect_error "sums to 5, not the model's 4 layers" "$remat" estimate --model llama --preset tiny --layers 4 --pp 2 \
  --stage-layers 2,3
expect_error "is not a multiple of --pp 2" "$remat" estimate --model llama --preset tiny --layers 4 --pp 2 \
  --schedule interleaved:2 --micro-batches 3
expect_error "do not split into 2 x 2 chunks" "$remat" estimate --model llama --preset tiny --layers 6 --pp 2 \
  --schedule interleaved:2 --micro-batches 2
expect_error "takes positive layer counts" "$remat" estimate --model llama --preset tiny --layers 4 --pp 2 \
  --stage-layers 2,2,
expect_error "apply with --pp N" "$remat" estimate --model llama --preset tiny --schedule gpipe
expect_error "apply with --pp N" "$remat" grads --weights llama.h5 --stage-layers 1,3
expect_error "not a schedule" "$remat" estimate --model llama --preset tiny --pp 2 --schedule pipedream
expect_error "not split into stages yet" "$remat" estimate --model bert --preset tiny --pp 2
expect_error "start 2 ranks" "$remat" grads --weights llama.h5 --pp 2 --micro-batches 2
expect_error "runs on a multiple of 2 ranks" "$remat" train --model llama --preset tiny --pp 2 --steps 1
finish pp_test
