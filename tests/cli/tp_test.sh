#!/usr/bin/env bash
# Tensor parallelism over 2 ranks, with and without sequence parallelism
# (docs/scale-out.md): `mpirun -n 2 remat grads --tp 2` gives the whole
# model's loss and gradients within float32 reduction tolerance of one
# process (row-parallel and vocabulary-parallel sums change order); every
# exact strategy stays bitwise `full` under the split, with and without
# dropout, at fp32 and bf16; each rank's measured activation peak is what
# `estimate --tp 2` says, and so do the bytes sent; training follows one
# process's losses and resumes bitwise after a kill; time and plan take the
# layout; bad layouts are refused in one line.
#   tp_test.sh path/to/remat path/to/mpiexec
set -uo pipefail
source "$(dirname "$0")/lib.sh"
mpi_test_start "$@"

# Three of the seven models a run (a sampled sweep: lib.sh's `sample`); what follows takes gpt2 and llama.
sample models 3 gpt2 llama mixtral encdec parallel bert revformer
for model in "${models[@]}"; do
  "$remat" export --model "$model" --preset tiny --out "$model.h5" >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
  expect_ok "$model grads, one process" "$remat" grads --weights "$model.h5" --out one.h5
  layouts=("--tp 2" "--tp 2 --sp")
  # gpt2's branches side by side, on one LayerNorm: each gathers its input and sums its output.
  [ "$model" = parallel ] && layouts=("--tp 2 --sp")
  [ "$model" = bert ] && layouts=("--tp 2")  # refused under --sp (below)
  for layout in "${layouts[@]}"; do
    # shellcheck disable=SC2206  # the layout's words, as a user types them
    split=($layout)
    # 1. The split model's gradients are the whole model's.
    expect_ok "$model grads $layout" "${mpi[@]}" "$remat" grads --weights "$model.h5" "${split[@]}" --out two.h5
    [ "$(grep -c '^loss' out.txt)" -eq 1 ] || fail "$model: more than one rank printed: $(cat out.txt)"
    close_grads one.h5 two.h5 1e-5 1e-6 || fail "$model $layout: gradients differ from one process's"
    # 2. Every strategy under the split: exact ones bitwise full; planned ones
    # (from timed costs the ranks agree on) within their budgets (without dropout at fp32: in 3).
    for run in "--dropout 0.1" "--precision bf16"; do
      # shellcheck disable=SC2086
      expect_ok "$model check $layout $run" "${mpi[@]}" "$remat" check --model "$model" "${split[@]}" $run \
        --strategies all,budget:min,budget:range:30%
    done
    # A plan from the device model keeps its budget too (the model's code holds a row-parallel
    # product's input through its all-reduce: dropping it frees nothing there).
    for preset in tiny small; do
      expect_ok "$model estimate $layout $preset budgets" "$remat" estimate --model "$model" --preset "$preset" \
        "${split[@]}" --strategies budget:min,budget:range:10%,budget:range:60%,budget:min:offload --device h100-80gb
    done
    # 3. Each rank's measured activation peak is what `estimate` says, shape-only in one process
    # (on tiny, the check also runs 2's planned strategies, without dropout at fp32).
    for preset in tiny small; do
      sizes=(--model "$model" --preset "$preset" --strategies all)
      checked=all,budget:min,budget:range:30%
      [ "$preset" = small ] && sizes+=(--layers 2 --seq 64) && checked=all
      "${mpi[@]}" "$remat" check "${sizes[@]/#all/$checked}" "${split[@]}" --json >check.json 2>err.txt ||
        fail "check $model $preset $layout: $(cat err.txt)"
      "$remat" estimate "${sizes[@]}" "${split[@]}" --json >estimate.json 2>err.txt || fail "estimate: $(cat err.txt)"
      py check.json estimate.json <<'PY' || fail "$model $preset $layout: measured is not the estimate"
import json, sys
check, estimate = (json.load(open(p)) for p in sys.argv[1:])
estimated = {r["strategy"]: r["activation_peak_bytes"] for r in estimate}
measured = {r["strategy"]: r["activation_peak_bytes"] for r in check["strategies"] if r["strategy"] in estimated}
assert measured == estimated, (measured, estimated)
assert {r["tp"] for r in estimate} == {2}
PY
    done
  done
done
# 3b. The probe's prediction of each rank's peak is its measurement: encdec's decoder embeds its tokens
# between the stacks, vocabulary-parallel, and its all-reduce peaks there beside the encoder's saves only
# (BlockSaves::outside_before; it was once added to every block's saves, 1776 bytes over on tiny).
"${mpi[@]}" "$remat" check --model encdec --preset tiny --tp 2 --strategies all --json >check.json 2>err.txt ||
  fail "check encdec --tp 2: $(cat err.txt)"
py check.json <<'PY' || fail "encdec --tp 2: a strategy's predicted peak is not its measured one"
import json, sys
rows = json.load(open(sys.argv[1]))["strategies"]
wrong = [(r["strategy"], r["activation_peak_bytes"], r["predicted_peak_bytes"]) for r in rows
         if r["activation_peak_bytes"] != r["predicted_peak_bytes"]]
assert not wrong and len(rows) == 8, wrong
PY
[ -e llama.h5 ] || "$remat" export --model llama --preset tiny --out llama.h5 >/dev/null 2>err.txt ||
  fail "export: $(cat err.txt)"  # what follows reads it, sampled or not
# 4. The bytes each rank sends in a step's collectives are what the estimate counts, recomputation's included.
for layout in "--tp 2" "--tp 2 --sp"; do
  # shellcheck disable=SC2206
  split=($layout)
  for strategy in full per-layer selective offload-checkpoint; do
    "${mpi[@]}" "$remat" grads --weights llama.h5 "${split[@]}" --strategy "$strategy" >out.txt 2>err.txt ||
      fail "grads --strategy $strategy: $(cat err.txt)"
    sent=$(sed -n 's/^sent \([0-9]*\) bytes to the other ranks$/\1/p' out.txt)
    "$remat" estimate --model llama --preset tiny "${split[@]}" --strategies "$strategy" --json >estimate.json ||
      fail "estimate --strategies $strategy"
    predicted=$(py -c "import json; print(int(json.load(open('estimate.json'))[0]['comm_bytes']))")
    [ -n "$sent" ] && [ "$sent" = "$predicted" ] ||
      fail "llama $layout $strategy: sent ${sent:-nothing said} bytes, the estimate says $predicted"
  done
done

# --freeze under the split: each rank freezes its parts. Every strategy is bitwise full; the gradients are one
# process's (the frozen ones absent from both files); each rank's peaks are the estimate's; a training follows
# one process's, its frozen weights untouched to the bit; time takes it.
expect_ok "check --tp 2 --sp --freeze-below 2" "${mpi[@]}" "$remat" check --model llama --layers 4 --tp 2 --sp \
  --freeze-below 2 --dropout 0.1 --strategies all
"$remat" export --model llama --preset tiny --layers 4 --out llama4.h5 >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
expect_ok "grads --freeze-below 2" "$remat" grads --weights llama4.h5 --freeze-below 2 --out one-frozen.h5
expect_ok "grads --tp 2 --sp --freeze-below 2" "${mpi[@]}" "$remat" grads --weights llama4.h5 --freeze-below 2 --tp 2 \
  --sp --out two-frozen.h5
"${mpi[@]}" "$remat" check --model llama --layers 4 --tp 2 --sp --freeze-below 2 --strategies all --json \
  >check.json 2>err.txt || fail "check --json --freeze-below 2: $(cat err.txt)"
"$remat" estimate --model llama --preset tiny --layers 4 --tp 2 --sp --freeze-below 2 --strategies all --json \
  >estimate.json 2>err.txt || fail "estimate --freeze-below 2: $(cat err.txt)"
F=(train --model llama --preset tiny --layers 4 --lr 3e-3 --grad-clip 1 --data copy --steps 30 --freeze-below 2)
expect_ok "train --freeze-below 2" "$remat" "${F[@]}" --out one-frozen-run.h5
expect_ok "train --tp 2 --sp --freeze-below 2" "${mpi[@]}" "$remat" "${F[@]}" --tp 2 --sp --out tp-frozen-run.h5
py <<'PY' || fail "--freeze under --tp 2 --sp: not one process's, or not the estimate"
import json, h5py, numpy as np
one, two = h5py.File("one-frozen.h5"), h5py.File("two-frozen.h5")
assert sorted(one["grads"]) == sorted(two["grads"]) and not any(n.startswith("layers.0.") for n in one["grads"])
assert abs(float(one["loss"][()]) - float(two["loss"][()])) <= 1e-6 * abs(float(one["loss"][()]))
for name in one["grads"]:
    a, b = one["grads"][name][:], two["grads"][name][:]
    assert np.abs(a - b).max() <= 1e-5 * max(np.abs(a).max(), 1e-30), name
estimated = {r["strategy"]: r["activation_peak_bytes"] for r in json.load(open("estimate.json"))}
measured = {r["strategy"]: r["activation_peak_bytes"] for r in json.load(open("check.json"))["strategies"]}
assert measured == estimated, (measured, estimated)
a, b = h5py.File("one-frozen-run.h5"), h5py.File("tp-frozen-run.h5")
assert np.abs(a["history/loss"][:] - b["history/loss"][:]).max() <= 1e-4
assert (b["history/comm_bytes"][:] == b["history/predicted_comm_bytes"][:]).all()
for name in a["params"]:
    if name.startswith(("layers.0.", "layers.1.")):
        assert a["params"][name][:].tobytes() == b["params"][name][:].tobytes(), name
assert sorted(a["optimizer/m"]) == sorted(b["optimizer/m"])
PY
expect_ok "time --tp 2 --freeze-below 1" "${mpi[@]}" "$remat" time --model llama --preset tiny --tp 2 --freeze-below 1 \
  --strategy per-layer --steps 1 --warmup 0

# time and plan under a split: timed steps on the ranks; a plan from the device model (a timed one is refused).
expect_ok "time --tp 2 --sp" "${mpi[@]}" "$remat" time --model gpt2 --preset tiny --tp 2 --sp --strategy per-layer \
  --steps 1 --warmup 0
grep -q "tensor-parallel over 2 ranks, with sequence parallelism" out.txt || fail "time --tp does not say the layout"
expect_ok "plan --tp 2 --device" "$remat" plan --config llama-7b --seq 4096 --tp 2 --sp --precision bf16 \
  --device h100-80gb --json

# Four ranks for llama's two key/value heads: each rank holds the head its query head uses (replicated, as
# Megatron does), their gradients summed over the ranks sharing them.
expect_ok "llama grads --tp 4" "${mpi4[@]}" "$remat" grads --weights llama.h5 --tp 4 --out four.h5
"$remat" grads --weights llama.h5 --out one.h5 >/dev/null 2>&1
py one.h5 four.h5 <<'PY' || fail "llama --tp 4 (replicated kv heads): gradients differ from one process's"
import sys, h5py, numpy as np
one, four = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
for name in one["grads"]:
    a, b = one["grads"][name][:], four["grads"][name][:]
    assert np.abs(a - b).max() <= 1e-5 * (np.abs(a).max() + 1e-30), name
PY
expect_ok "llama check --tp 4 --sp" "${mpi4[@]}" "$remat" check --model llama --tp 4 --sp --dropout 0.1 --strategies all

# Qwen2 (llama with q/k/v biases): the biases split with their projections' rows, and at --tp 4 each rank's
# key/value head keeps its biases whole, their gradients summed like its weights'. Random biases: a zero one
# would test nothing.
py llama.h5 qwen2.h5 <<'PY' || fail "making a Qwen2 weight file"
import sys, shutil, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    f.attrs["qkv_bias"] = np.int64(1)
    rng = np.random.default_rng(5)
    for w in [n for n in f["params"] if n.endswith((".wq.weight", ".wk.weight", ".wv.weight"))]:
        f["params"][w[:-len("weight")] + "bias"] = rng.uniform(-0.5, 0.5, f["params"][w].shape[0]).astype(np.float32)
PY
"$remat" grads --weights qwen2.h5 --out one.h5 >/dev/null 2>&1 || fail "qwen2 grads, one process"
for ranks in 2 4; do
  launch=("${mpi[@]}"); [ "$ranks" = 4 ] && launch=("${mpi4[@]}")
  expect_ok "qwen2 grads --tp $ranks --sp" "${launch[@]}" "$remat" grads --weights qwen2.h5 --tp "$ranks" --sp --out split.h5
  py one.h5 split.h5 <<'PY' || fail "qwen2 --tp $ranks: gradients differ from one process's"
import sys, h5py, numpy as np
one, split = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
assert sorted(one["grads"]) == sorted(split["grads"])
assert any(n.endswith(".wk.bias") for n in one["grads"])
for name in one["grads"]:
    a, b = one["grads"][name][:], split["grads"][name][:]
    assert np.abs(a - b).max() <= 1e-5 * (np.abs(a).max() + 1e-30), name
PY
done
expect_ok "qwen2 check --tp 4" "${mpi4[@]}" "$remat" check --weights qwen2.h5 --tp 4 --dropout 0.1 --strategies all

# 5. Training: 100 steps under --tp 2 --sp, and under tensor parallelism 2 x data parallelism 2 on four ranks,
# follow one process's losses (with --accumulate 2 for the two replicas) within 1e-4; the communication is as
# predicted; killed and resumed, a run ends bitwise as one left alone.
T=(train --model llama --preset tiny --lr 3e-3 --grad-clip 1 --data copy --steps 100)
"$remat" "${T[@]}" --out one-run.h5 >/dev/null 2>err.txt || fail "train, one process: $(cat err.txt)"
"$remat" "${T[@]}" --accumulate 2 --out acc-run.h5 >/dev/null 2>err.txt || fail "train --accumulate 2: $(cat err.txt)"
expect_ok "train --tp 2 --sp" "${mpi[@]}" "$remat" "${T[@]}" --tp 2 --sp --out tp-run.h5
expect_ok "train --tp 2 --sp on 4 ranks" "${mpi4[@]}" "$remat" "${T[@]}" --tp 2 --sp --out tpdp-run.h5
grep -q "x 2 ranks, each tensor-parallel 2 with sequence parallelism" out.txt || fail "train: the layout is not said"
for pair in "one-run.h5 tp-run.h5" "acc-run.h5 tpdp-run.h5"; do
  # shellcheck disable=SC2086
  py $pair <<'PY' || fail "train --tp ($pair): off one process's trajectory, or its communication"
import sys, h5py, numpy as np
one, two = (h5py.File(p) for p in sys.argv[1:])
a, b = one["history/loss"][:], two["history/loss"][:]
assert len(a) == len(b) == 100 and np.abs(a - b).max() <= 1e-4, np.abs(a - b).max()
sent, predicted = two["history/comm_bytes"][:], two["history/predicted_comm_bytes"][:]
assert (sent > 0).all() and (sent == predicted).all(), (sent[:3], predicted[:3])
PY
done
# grads --tp 2 on 4 ranks: two data-parallel groups, one sequence each, their mean the whole batch's.
for model in gpt2 llama; do
  "$remat" export --model "$model" --preset tiny --out "dp-$model.h5" >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
  expect_ok "$model grads, one process" "$remat" grads --weights "dp-$model.h5" --out one.h5
  expect_ok "$model grads --tp 2 --sp on 4 ranks" "${mpi4[@]}" "$remat" grads --weights "dp-$model.h5" --tp 2 --sp --out dp.h5
  grep -q "the mean of 2 data-parallel groups' 1 sequences each" out.txt || fail "grads on 4 ranks: $(cat out.txt)"
  close_grads one.h5 dp.h5 1e-5 1e-6 || fail "$model grads --tp 2 on 4 ranks: gradients differ from one process's"
  # check and time take the same layout: every strategy bitwise full on the groups' averaged gradients, full's
  # loss the one grads gave, each rank's activation peak the estimate's for its own sequence.
  "${mpi4[@]}" "$remat" check --weights "dp-$model.h5" --tp 2 --sp --strategies all --json >check.json 2>err.txt ||
    fail "$model check --tp 2 --sp on 4 ranks: $(cat err.txt)"
  OMP_NUM_THREADS=1 "$remat" estimate --model "$model" --preset tiny --tp 2 --sp --batch 1 --strategies all --json \
    >estimate.json 2>err.txt || fail "estimate: $(cat err.txt)"
  py check.json estimate.json dp.h5 <<'PY' || fail "$model check --tp 2 --sp on 4 ranks: not grads' loss, not bitwise or not the estimate"
import json, sys, h5py
check, estimate = (json.load(open(p)) for p in sys.argv[1:3])
assert check["not_bitwise_exact"] == 0 and check["sizes"]["B"] == 1, check["sizes"]
rows = {r["strategy"]: r for r in check["strategies"]}
assert rows["full"]["loss"] == float(h5py.File(sys.argv[3])["loss"][()]), (rows["full"]["loss"],)
measured = {s: r["activation_peak_bytes"] for s, r in rows.items()}
assert measured == {r["strategy"]: r["activation_peak_bytes"] for r in estimate}, measured
PY
  "${mpi4[@]}" "$remat" time --weights "dp-$model.h5" --tp 2 --steps 1 --warmup 0 --json >time.json 2>err.txt ||
    fail "$model time --tp 2 on 4 ranks: $(cat err.txt)"
  py -c "import json; assert json.load(open('time.json'))['data_groups'] == 2" || fail "time on 4 ranks: $(cat time.json)"
done
"$remat" export --model mixtral --preset tiny --out dp-mixtral.h5 >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
"$remat" export --model gpt2 --preset tiny --batch 3 --out dp-odd.h5 >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
# (4 ranks on 2 cores: Kokkos' warning beside the one error line.)
for refusal in "dp-mixtral.h5:load-balancing loss is taken over the whole batch" \
                "dp-odd.h5:2 data-parallel groups of --tp 2 do not divide the batch B = 3"; do
  for command in grads check time; do
    "${mpi4[@]}" "$remat" $command --weights "${refusal%%:*}" --tp 2 >out.txt 2>err.txt
    rc=$?
    [ $rc -eq 2 ] && [ "$(grep -c "^remat: error: .*${refusal#*:}" err.txt)" -eq 1 ] ||
      fail "$command --tp 2 on 4 ranks, ${refusal%%:*}: exit $rc, $(cat err.txt)"
  done
done

K=(train --model llama --preset small --layers 2 --seq 64 --lr 3e-3 --grad-clip 1 --data copy --tp 2 --sp
   --strategy per-layer --dropout 0.1 --steps 10 --save-every 2)
"${mpi4[@]}" "$remat" "${K[@]}" --out whole-run.h5 >/dev/null 2>err.txt || fail "train --tp 2: $(cat err.txt)"
cut_at_first_save cut-run.h5 "${mpi4[@]}" "$remat" "${K[@]}" --out cut-run.h5
expect_ok "train --tp 2 --resume" "${mpi4[@]}" "$remat" "${K[@]}" --out cut-run.h5 --resume
grep -Eq "resuming cut-run.h5 at step [1-9] of 10" out.txt ||
  fail "the killed run did not resume mid-way: $(cat out.txt)"
same_run whole-run.h5 cut-run.h5 || fail "train --tp 2, killed and resumed, is not the run left alone"

# Tensor parallelism 2 x ZeRO-3 over the data group (4 ranks): bitwise tensor parallelism 2 x data
# parallelism 2, at fp32 and at bf16 under --sp with dropout; communication as predicted, and what a rank
# holds (its parts' shards, gathered and reducing peaks, activations) as `estimate --tp 2 --ranks 2
# --shard-params` says, on one thread as each rank here.
# One of the two a run (sampled: lib.sh's `sample`).
sample runs 1 "--model llama --strategy per-layer" "--model gpt2 --sp --strategy sqrt --precision bf16"
for run in "${runs[@]}"; do
  # shellcheck disable=SC2206  # the run's words, as a user types them
  words=($run)
  Z=(train --preset tiny --lr 3e-3 --grad-clip 0.05 --data copy --steps 3 --accumulate 2 --dropout 0.1 --tp 2 "${words[@]}")
  "${mpi4[@]}" "$remat" "${Z[@]}" --out tpdp.h5 --force >/dev/null 2>err.txt || fail "train $run: $(cat err.txt)"
  "${mpi4[@]}" "$remat" "${Z[@]}" --shard-params --out tpzero.h5 --force >/dev/null 2>err.txt ||
    fail "train $run --shard-params: $(cat err.txt)"
  OMP_NUM_THREADS=1 "$remat" estimate --preset tiny --tp 2 --ranks 2 --shard-params "${words[@]/--strategy/--strategies}" \
    --json >estimate.json 2>err.txt || fail "estimate: $(cat err.txt)"
  py tpdp.h5 tpzero.h5 estimate.json <<'PY' || fail "$run: --tp 2 --shard-params is not --tp 2 x data 2, or its estimate"
import sys, json, h5py
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
for key in ("loss", "grad_norm", "activation_peak"):
    assert a["history/" + key][:].tobytes() == b["history/" + key][:].tobytes(), key
for name in a["params"]:
    assert a["params"][name][:].tobytes() == b["params"][name][:].tobytes(), name
PY
  state_as_estimated tpzero.h5 estimate.json || fail "$run: --tp 2 --shard-params holds or sends other than estimated"
  # Killed after its first save and resumed sharded: each rank takes its part's shard of the saved
  # (whole) weights and optimizer state, and the run goes on bitwise.
  cut_at_first_save cut-zero.h5 "${mpi4[@]}" "$remat" "${Z[@]}" --shard-params --save-every 1 --out cut-zero.h5
  expect_ok "train $run --shard-params --resume" "${mpi4[@]}" "$remat" "${Z[@]}" --shard-params --save-every 1 \
    --out cut-zero.h5 --resume
  grep -Eq "resuming cut-zero.h5 at step [12] of 3" out.txt || fail "$run --shard-params: not resumed mid-way: $(cat out.txt)"
  same_run tpzero.h5 cut-zero.h5 || fail "$run --shard-params, killed and resumed, is not the run left alone"
  rm -f cut-zero.h5
done
# A planned strategy under tp 2 x data 2, timed on every rank: the ranks agree on one profile (the
# slowest's times), so all run one plan, sharded or not, bitwise alike and within its budget (each
# run times its own: the two may plan differently, never their ranks).
B=(train --model gpt2 --preset tiny --lr 3e-3 --data copy --steps 3 --dropout 0.1 --tp 2 --strategy budget:range:30%)
"${mpi4[@]}" "$remat" "${B[@]}" --out plan-dp.h5 --force >/dev/null 2>err.txt || fail "train budget: $(cat err.txt)"
"${mpi4[@]}" "$remat" "${B[@]}" --shard-params --out plan-zero.h5 --force >/dev/null 2>err.txt ||
  fail "train budget --shard-params: $(cat err.txt)"
py plan-dp.h5 plan-zero.h5 <<'PY' || fail "train --tp 2 budget: sharded is not unsharded"
import sys, h5py
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
for key in ("loss", "grad_norm"):
    assert a["history/" + key][:].tobytes() == b["history/" + key][:].tobytes(), key
PY

# The parameters a rank holds: a half of every split layer (gpt2 tiny: norms, wpe and row biases whole).
"$remat" estimate --model gpt2 --preset tiny --strategies full --tp 2 --json >estimate.json || fail "estimate"
py -c "
import json
r = json.load(open('estimate.json'))[0]
D, L, V, S = 32, 2, 64, 16
split = V * D + L * (3 * D * D + 3 * D + D * D + 4 * D * D + 4 * D + 4 * D * D)
whole = S * D + L * (4 * D + D + D) + 2 * D
assert r['parameter_count'] == split // 2 + whole, (r['parameter_count'], split // 2 + whole)
" || fail "estimate --tp 2 does not count one rank's parts"

# 6. LoRA under the split: each adapter splits with its weight (B's rows with a column-parallel weight's, A's
# columns with a row-parallel one's; the other matrix whole on every rank, its gradient summed over them, over
# the ranks sharing a replicated key/value head at --tp 4). The gradients are one process's, every strategy is
# bitwise full with each rank's peak the estimate's, and a training follows one process's adapters and resumes
# bitwise after a kill.
lora_gpt2="*.attn.c_attn.weight,*.attn.c_proj.weight,*.mlp.c_fc.weight,*.mlp.c_proj.weight"
lora_llama="*.attention.wq.weight,*.attention.wv.weight,*.attention.wo.weight,*.feed_forward.w1.weight,*.feed_forward.w2.weight"
for model in gpt2 llama; do
  targets=lora_$model
  L=(--lora 4 --lora-targets "${!targets}")
  expect_ok "$model grads --lora, one process" "$remat" grads --weights "dp-$model.h5" "${L[@]}" --out one.h5
  layouts=("--tp 2 --sp")
  [ "$model" = llama ] && layouts+=("--tp 4")  # 2 key/value heads: each held by 2 of the 4 ranks
  for layout in "${layouts[@]}"; do
    # shellcheck disable=SC2206  # the layout's words, as a user types them
    split=($layout)
    launch=("${mpi[@]}")
    [ "${split[1]}" = 4 ] && launch=("${mpi4[@]}")
    expect_ok "$model grads --lora $layout" "${launch[@]}" "$remat" grads --weights "dp-$model.h5" "${L[@]}" "${split[@]}" \
      --out two.h5
    close_grads one.h5 two.h5 1e-5 1e-6 || fail "$model --lora $layout: gradients differ from one process's"
  done
  "${mpi[@]}" "$remat" check --model "$model" --tp 2 --sp "${L[@]}" --strategies all --json >check.json 2>err.txt ||
    fail "$model check --tp 2 --sp --lora: $(cat err.txt)"
  OMP_NUM_THREADS=1 "$remat" estimate --model "$model" --preset tiny --tp 2 --sp "${L[@]}" --strategies all --json \
    >estimate.json 2>err.txt || fail "estimate --tp 2 --sp --lora: $(cat err.txt)"
  py check.json estimate.json <<'PY' || fail "$model check --tp 2 --sp --lora: not bitwise, or not the estimate"
import json, sys
check, estimate = (json.load(open(p)) for p in sys.argv[1:])
assert check["not_bitwise_exact"] == 0
measured = {r["strategy"]: r["activation_peak_bytes"] for r in check["strategies"]}
assert measured == {r["strategy"]: r["activation_peak_bytes"] for r in estimate}, measured
PY
done
R=(train --model llama --preset tiny --lr 3e-3 --data copy --steps 20 --lora 4 --lora-targets "$lora_llama")
"$remat" "${R[@]}" --out lora-one.h5 >/dev/null 2>err.txt || fail "train --lora, one process: $(cat err.txt)"
for layout in "--tp 2 --sp" "--tp 4"; do
  # shellcheck disable=SC2206
  split=($layout)
  launch=("${mpi[@]}")
  [ "${split[1]}" = 4 ] && launch=("${mpi4[@]}")
  expect_ok "train --lora $layout" "${launch[@]}" "$remat" "${R[@]}" "${split[@]}" --out "lora-tp${split[1]}.h5" \
    --adapters-out "adapters-tp${split[1]}.h5"
  py lora-one.h5 "lora-tp${split[1]}.h5" "adapters-tp${split[1]}.h5" <<'PY' || fail "train --lora $layout: wrong"
# one process's losses and adapters; --adapters-out the run file's adapters, whole
import sys, h5py, numpy as np
one, split, alone = (h5py.File(p) for p in sys.argv[1:])
assert sorted(alone["params"]) == sorted(n for n in split["params"] if ".lora_" in n), list(alone["params"])
for n in alone["params"]:  # whole, as the run file holds them
    assert alone["params"][n][:].tobytes() == split["params"][n][:].tobytes(), n
assert np.abs(one["history/loss"][:] - split["history/loss"][:]).max() <= 1e-5
adapters = [n for n in one["params"] if ".lora_" in n]
assert adapters and sorted(adapters) == sorted(n for n in split["params"] if ".lora_" in n)
for n in adapters:
    a, b = one["params"][n][:], split["params"][n][:]
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max(), n
PY
done
"${mpi[@]}" "$remat" "${R[@]}" --tp 2 --sp --save-every 2 --out lora-whole.h5 >/dev/null 2>err.txt ||
  fail "train --tp 2 --lora: $(cat err.txt)"
cut_at_first_save lora-cut.h5 "${mpi[@]}" "$remat" "${R[@]}" --tp 2 --sp --save-every 2 --out lora-cut.h5
expect_ok "train --tp 2 --lora --resume" "${mpi[@]}" "$remat" "${R[@]}" --tp 2 --sp --save-every 2 --out lora-cut.h5 --resume
same_run lora-whole.h5 lora-cut.h5 || fail "train --tp 2 --lora, killed and resumed, is not the run left alone"

# Golden files under the split: a one-process golden passes a --tp 2 --sp check (each rank comparing its parts,
# the verdict every rank's), and one saved under --tp 2 holds the whole model (one process's weights bitwise, its
# gradients within float32 reduction tolerance) and passes a one-process check.
expect_ok "check --save-golden, one process" "$remat" check --model llama --strategies full --save-golden gold-one.h5
expect_ok "check --golden --tp 2 --sp" "${mpi[@]}" "$remat" check --golden gold-one.h5 --tp 2 --sp --strategies all
grep -q "golden gold-one.h5: pass: 8 of 8" out.txt || fail "check --golden --tp 2 --sp: $(cat out.txt)"
expect_ok "check --tp 2 --save-golden" "${mpi[@]}" "$remat" check --model llama --tp 2 --strategies full --save-golden gold-tp.h5
expect_ok "check --golden (saved under --tp 2)" "$remat" check --golden gold-tp.h5 --strategies all
grep -q "golden gold-tp.h5: pass" out.txt || fail "check --golden gold-tp.h5: $(cat out.txt)"
py gold-one.h5 gold-tp.h5 <<'PY' || fail "a golden saved under --tp 2 is not the whole model's"
import sys, h5py, numpy as np
one, tp = (h5py.File(p) for p in sys.argv[1:])
assert sorted(one["params"]) == sorted(tp["params"]) and sorted(one["grads"]) == sorted(tp["grads"])
assert all(one["params"][n][:].tobytes() == tp["params"][n][:].tobytes() for n in one["params"])
for n in one["grads"]:
    a, b = one["grads"][n][:], tp["grads"][n][:]
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max(), n
PY
"${mpi4[@]}" "$remat" check --golden gold-one.h5 --tp 2 >out.txt 2>err.txt
[ $? -eq 2 ] && [ "$(grep -c "^remat: error: .*beside data-parallel groups with a golden file: not yet" err.txt)" -eq 1 ] ||
  fail "check --golden --tp 2 on 4 ranks: $(cat err.txt)"

# QLoRA under the split: a frozen weight's part is cut from the whole weight quantized (each rank keeps the
# whole's second-level nf4 scales), so every rank dequantizes one process's values at its places. gpt2 `small`
# at a short batch: every split leaves whole blocks of 64 (tiny's do not; refused below). Gradients within
# float32 reduction tolerance of one process's (computed in fp32), every strategy bitwise full with each rank's
# peak the estimate's, a training following one process's with the quantized bytes it saves (joined from the
# ranks) bitwise one process's and what a rank holds as estimated, and killed and resumed bitwise.
Q=(--preset small --batch 2 --seq 32 --lora 4 --lora-targets "$lora_gpt2" --quantize nf4)
"$remat" export --model gpt2 --preset small --batch 2 --seq 32 --out q-gpt2.h5 >/dev/null 2>err.txt ||
  fail "export small: $(cat err.txt)"
expect_ok "grads QLoRA, one process" "$remat" grads --weights q-gpt2.h5 --lora 4 --lora-targets "$lora_gpt2" \
  --quantize nf4 --precision fp32 --out one.h5
expect_ok "grads QLoRA --tp 2 --sp" "${mpi[@]}" "$remat" grads --weights q-gpt2.h5 --lora 4 --lora-targets "$lora_gpt2" \
  --quantize nf4 --precision fp32 --tp 2 --sp --out two.h5
close_grads one.h5 two.h5 1e-5 1e-6 || fail "QLoRA --tp 2 --sp: gradients differ from one process's"
"${mpi[@]}" "$remat" check --model gpt2 "${Q[@]}" --tp 2 --sp --strategies all --json >check.json 2>err.txt ||
  fail "check QLoRA --tp 2 --sp: $(cat err.txt)"
OMP_NUM_THREADS=1 "$remat" estimate --model gpt2 "${Q[@]}" --tp 2 --sp --strategies all --json >estimate.json \
  2>err.txt || fail "estimate QLoRA --tp 2 --sp: $(cat err.txt)"
py check.json estimate.json <<'PY' || fail "check QLoRA --tp 2 --sp: not bitwise, or not the estimate"
import json, sys
check, estimate = (json.load(open(p)) for p in sys.argv[1:])
assert check["not_bitwise_exact"] == 0
measured = {r["strategy"]: r["activation_peak_bytes"] for r in check["strategies"]}
assert len(measured) >= 8 and measured == {r["strategy"]: r["activation_peak_bytes"] for r in estimate}, measured
PY
QT=(train --model gpt2 "${Q[@]}" --precision fp32 --lr 3e-3 --data copy --steps 6)
expect_ok "train QLoRA, one process" "$remat" "${QT[@]}" --out q-one.h5
expect_ok "train QLoRA --tp 2 --sp" "${mpi[@]}" "$remat" "${QT[@]}" --tp 2 --sp --save-every 2 --out q-tp.h5
OMP_NUM_THREADS=1 "$remat" estimate --model gpt2 "${Q[@]}" --precision fp32 --tp 2 --sp --strategies full --json \
  >estimate.json 2>err.txt || fail "estimate QLoRA --tp 2 --sp (fp32): $(cat err.txt)"
py q-one.h5 q-tp.h5 estimate.json <<'PY' || fail "train QLoRA --tp 2 --sp: off one process's run, or not as estimated"
import sys, json, h5py, numpy as np
one, tp = (h5py.File(p) for p in sys.argv[1:3])
row = json.load(open(sys.argv[3]))[0]
assert np.abs(one["history/loss"][:] - tp["history/loss"][:]).max() <= 1e-4
quantized = [n for n in one["params"] if one["params"][n].dtype == np.uint8]
assert len(quantized) == 48 and sorted(one["params"]) == sorted(tp["params"])
for n in quantized:  # the whole weights' bytes, joined from the ranks' parts
    assert one["params"][n][:].tobytes() == tp["params"][n][:].tobytes(), n
assert int(tp.attrs["rank_memory.parameters"]) == row["parameter_bytes"] + row["quantized_bytes"]
assert int(tp.attrs["rank_memory.optimizer"]) == row["optimizer_bytes"]
PY
cut_at_first_save q-cut.h5 "${mpi[@]}" "$remat" "${QT[@]}" --tp 2 --sp --save-every 2 --out q-cut.h5
expect_ok "train QLoRA --tp 2 --resume" "${mpi[@]}" "$remat" "${QT[@]}" --tp 2 --sp --save-every 2 --out q-cut.h5 --resume
same_run q-tp.h5 q-cut.h5 || fail "train QLoRA --tp 2, killed and resumed, is not the run left alone"
# The matrix under the split takes it too: every cell bitwise full, the layout and the fine-tuning in its key.
expect_ok "matrix QLoRA --tp 2" "${mpi[@]}" "$remat" matrix --models gpt2 "${Q[@]}" --tp 2 --strategies full,per-layer \
  --steps 1 --warmup 0 --out q-matrix.h5
py q-matrix.h5 <<'PY' || fail "matrix QLoRA --tp 2: a cell not bitwise full, or its key without the split"
import sys, h5py
runs = h5py.File(sys.argv[1])["runs"]
assert len(runs) == 2 and all(int(r.attrs["bitwise_equal_to_full"]) == 1 for r in runs.values())
assert all(r.attrs["layout"] == "tp=2" and "quantize:nf4" in r.attrs["finetune"] for r in runs.values())
PY
# Key/value heads shared by ranks (llama's 2 at --tp 4): each rank's part of wk and wv is its head's rows of the
# whole weight quantized, read as it is (frozen: no gradient to sum over the ranks sharing it). The frozen
# attention of llama `small` in nf4: one process's gradients, and a training's quantized bytes one process's.
KV=(--freeze '*.attention.*' --quantize nf4 --precision fp32)
"$remat" export --model llama --preset small --batch 2 --seq 32 --out q-llama.h5 >/dev/null 2>err.txt ||
  fail "export llama small: $(cat err.txt)"
expect_ok "grads frozen attention in nf4, one process" "$remat" grads --weights q-llama.h5 "${KV[@]}" --out one.h5
grep -q "quantized (nf4): 48 frozen linear weights" out.txt || fail "llama: not every attention weight quantized: $(cat out.txt)"
expect_ok "grads frozen attention in nf4 --tp 4" "${mpi4[@]}" "$remat" grads --weights q-llama.h5 "${KV[@]}" --tp 4 \
  --out two.h5
grep -q "quantized (nf4): 48 frozen linear weights" out.txt || fail "llama --tp 4: wk, wv left in floats: $(cat out.txt)"
close_grads one.h5 two.h5 1e-5 1e-6 || fail "llama nf4 --tp 4: gradients differ from one process's"
KT=(train --model llama --preset small --batch 2 --seq 32 "${KV[@]}" --lr 3e-3 --data copy --steps 3)
expect_ok "train frozen attention in nf4, one process" "$remat" "${KT[@]}" --out kv-one.h5
expect_ok "train frozen attention in nf4 --tp 4" "${mpi4[@]}" "$remat" "${KT[@]}" --tp 4 --out kv-tp.h5
py kv-one.h5 kv-tp.h5 <<'PY' || fail "train nf4 --tp 4: off one process's losses, or its quantized bytes"
import sys, h5py, numpy as np
one, tp = (h5py.File(p) for p in sys.argv[1:])
assert np.abs(one["history/loss"][:] - tp["history/loss"][:]).max() <= 1e-5
quantized = [n for n in one["params"] if one["params"][n].dtype == np.uint8]
assert len(quantized) == 48 and all(one["params"][n][:].tobytes() == tp["params"][n][:].tobytes() for n in quantized)
PY

# 7. Bad layouts: one line, exit 2.
expect_error "does not divide the attention heads H = 4" "$remat" check --model gpt2 --tp 3
expect_error "runs on a multiple of 2 ranks" "$remat" check --model gpt2 --tp 2
expect_error "--sp splits the sequence over a tensor-parallel group" "$remat" estimate --model gpt2 --sp
expect_error "bert is not split over the sequence yet" "$remat" estimate --model bert --tp 2 --sp
expect_error "--sp splits the sequence over a tensor-parallel group" "$remat" train --model gpt2 --preset tiny --sp \
  --steps 1
expect_error "runs on a multiple of 2 ranks" "$remat" train --model gpt2 --preset tiny --tp 2 --steps 1
expect_error "plan with --device" "$remat" plan --model gpt2 --tp 2 --budget min
expect_error "'layers.0.attention.wo.weight' [32, 32] splits into runs of 16 values, not whole blocks of 64" \
  "$remat" estimate --model llama --preset tiny --tp 2 --lora 4 --quantize nf4
expect_error "does not divide the sequence length S = 15" "$remat" estimate --model gpt2 --preset tiny --tp 2 --sp \
  --seq 15
finish tp_test
