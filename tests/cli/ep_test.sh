#!/usr/bin/env bash
# Expert parallelism over 2 ranks (docs/scale-out.md): `mpirun -n 2 remat
# grads --ep 2` gives mixtral's whole loss and gradients within float32
# reduction tolerance of one process (each rank's mean loss and the shared
# layers' gradients are summed over the ranks); every exact strategy stays
# bitwise `full` under the split, with dropout and at bf16; where the routing
# is balanced by construction (every token to both of 2 experts) each rank's
# activation peak and the bytes it sends are what `estimate --ep 2` says;
# training follows one process's losses and resumes bitwise after a kill;
# bad layouts are refused in one line.
#   ep_test.sh path/to/remat path/to/mpiexec
set -uo pipefail
source "$(dirname "$0")/lib.sh"
mpi_test_start "$@"

# 1. The split model's loss and gradients are the whole model's.
"$remat" export --model mixtral --preset tiny --out mixtral.h5 >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
expect_ok "grads, one process" "$remat" grads --weights mixtral.h5 --out one.h5
expect_ok "grads --ep 2" "${mpi[@]}" "$remat" grads --weights mixtral.h5 --ep 2 --out two.h5
[ "$(grep -c '^loss' out.txt)" -eq 1 ] || fail "more than one rank printed: $(cat out.txt)"
grep -q "/grads for 41 parameters" out.txt || fail "grads --ep does not write the whole model's: $(cat out.txt)"
py one.h5 two.h5 <<'PY' || fail "grads --ep 2: gradients differ from one process's"
import sys, h5py, numpy as np
one, two = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
l1, l2 = float(one["loss"][()]), float(two["loss"][()])
assert abs(l1 - l2) <= 1e-6 * abs(l1), (l1, l2)
assert sorted(one["grads"]) == sorted(two["grads"])
for name in one["grads"]:
    a, b = one["grads"][name][:], two["grads"][name][:]
    scale = np.abs(a).max() + 1e-30
    assert np.abs(a - b).max() <= 1e-5 * scale, (name, np.abs(a - b).max() / scale)
PY

# On 4 ranks, two expert groups are data-parallel, each on its own half of the batch (at --router-aux 0: the
# load-balancing loss is the whole batch's): grads is one process's, every strategy bitwise full on the groups'
# averaged gradients, time says so; the groups' refusals are one line.
"$remat" export --model mixtral --preset tiny --batch 4 --out mixtral-b4.h5 >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
expect_ok "grads --router-aux 0, one process" "$remat" grads --weights mixtral-b4.h5 --router-aux 0 --out one-b4.h5
expect_ok "grads --ep 2 on 4 ranks" "${mpi4[@]}" "$remat" grads --weights mixtral-b4.h5 --router-aux 0 --ep 2 --out dp.h5
grep -q "the mean of 2 data-parallel groups' 2 sequences each" out.txt || fail "grads --ep 2 on 4 ranks: $(cat out.txt)"
py one-b4.h5 dp.h5 <<'PY' || fail "grads --ep 2 on 4 ranks: gradients differ from one process's"
import sys, h5py, numpy as np
one, two = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
assert abs(float(one["loss"][()]) - float(two["loss"][()])) <= 1e-6 * abs(float(one["loss"][()]))
assert sorted(one["grads"]) == sorted(two["grads"])
for name in one["grads"]:
    a, b = one["grads"][name][:], two["grads"][name][:]
    assert np.abs(a - b).max() <= 1e-5 * (np.abs(a).max() + 1e-30), name
PY
expect_ok "check --ep 2 on 4 ranks" "${mpi4[@]}" "$remat" check --weights mixtral-b4.h5 --router-aux 0 --ep 2 --strategies all
grep -q "2 data-parallel groups of 2 ranks" out.txt || fail "check --ep 2 on 4 ranks does not say its groups: $(cat out.txt)"
"${mpi4[@]}" "$remat" time --weights mixtral-b4.h5 --router-aux 0 --ep 2 --steps 1 --warmup 0 --json >time.json 2>err.txt ||
  fail "time --ep 2 on 4 ranks: $(cat err.txt)"
py -c "import json; assert json.load(open('time.json'))['data_groups'] == 2" || fail "time --ep 2 on 4 ranks: $(cat time.json)"
for refusal in "mixtral-b4.h5::load-balancing loss is taken over the whole batch" \
               "mixtral.h5:--router-aux 0:leave each 1 sequences, which --ep 2 does not divide"; do
  IFS=: read -r file extra why <<<"$refusal"
  # shellcheck disable=SC2086  # the extra flags' words
  "${mpi4[@]}" "$remat" check --weights "$file" $extra --ep 2 >out.txt 2>err.txt
  rc=$?
  [ $rc -eq 2 ] && [ "$(grep -c "^remat: error: .*$why" err.txt)" -eq 1 ] || fail "check --ep 2 on 4 ranks, $file: exit $rc, $(cat err.txt)"
done

# 2. Every strategy under the split: exact ones bitwise full.
for run in "--dropout 0" "--dropout 0.1" "--precision bf16"; do
  # shellcheck disable=SC2086
  expect_ok "check --ep 2 $run" "${mpi[@]}" "$remat" check --model mixtral --ep 2 $run --strategies all
done

# Four ranks, one expert each (a batch of 4: a sequence each).
mpi_ranks "$mpiexec" 4
expect_ok "check --ep 4" "${mpi[@]}" "$remat" check --model mixtral --ep 4 --batch 4 --dropout 0.1 --strategies all
mpi_ranks "$mpiexec" 2

# 3. Memory and communication as estimated, where every token goes to both of
# 2 experts (a balanced routing, which the estimate assumes). One thread, as
# each rank has here: the fused attention's workspace is per host thread.
balanced=(--model mixtral --preset tiny --experts 2 --top-k 2)
"${mpi[@]}" "$remat" check "${balanced[@]}" --ep 2 --strategies all --json >check.json 2>err.txt ||
  fail "check: $(cat err.txt)"
OMP_NUM_THREADS=1 "$remat" estimate "${balanced[@]}" --ep 2 --strategies all --json >estimate.json 2>err.txt ||
  fail "estimate: $(cat err.txt)"
py check.json estimate.json <<'PY' || fail "measured is not the estimate under --ep 2"
import json, sys
check, estimate = (json.load(open(p)) for p in sys.argv[1:])
measured = {r["strategy"]: r["activation_peak_bytes"] for r in check["strategies"]}
estimated = {r["strategy"]: r["activation_peak_bytes"] for r in estimate}
assert measured == estimated, (measured, estimated)
assert {r["ep"] for r in estimate} == {2}
PY
"$remat" export "${balanced[@]}" --out balanced.h5 >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
for strategy in full per-layer selective; do
  "${mpi[@]}" "$remat" grads --weights balanced.h5 --ep 2 --strategy "$strategy" >out.txt 2>err.txt ||
    fail "grads --strategy $strategy: $(cat err.txt)"
  sent=$(sed -n 's/^sent \([0-9]*\) bytes to the other ranks$/\1/p' out.txt)
  "$remat" estimate "${balanced[@]}" --ep 2 --strategies "$strategy" --json >estimate.json ||
    fail "estimate --strategies $strategy"
  predicted=$(py -c "import json; print(int(json.load(open('estimate.json'))[0]['comm_bytes']))")
  [ -n "$sent" ] && [ "$sent" = "$predicted" ] || fail "$strategy: sent ${sent:-nothing said} bytes, the estimate says $predicted"
done

# --freeze under the split: every rank freezes alike, its patterns read against the whole model's names (an
# expert another rank holds is no error). The gradients are one process's (the frozen ones absent from both),
# every strategy is bitwise full, the peaks are the estimate's (balanced), a training follows one process's
# with its frozen weights bitwise (below, in 4).
P='layers.0.*,layers.1.block_sparse_moe.experts.3.*'  # expert 3: rank 1's alone
expect_ok "grads --freeze" "$remat" grads --weights mixtral.h5 --freeze "$P" --out one-frozen.h5
expect_ok "grads --ep 2 --freeze" "${mpi[@]}" "$remat" grads --weights mixtral.h5 --ep 2 --freeze "$P" --out two-frozen.h5
grep -q "/grads for 19 parameters" out.txt || fail "grads --ep --freeze does not write what trains: $(cat out.txt)"
py one-frozen.h5 two-frozen.h5 <<'PY' || fail "grads --ep 2 --freeze: gradients differ from one process's"
import sys, h5py, numpy as np
one, two = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
assert sorted(one["grads"]) == sorted(two["grads"]) and len(two["grads"]) == 19
assert not any(n.startswith("layers.0.") or ".experts.3." in n for n in two["grads"])
for name in one["grads"]:
    a, b = one["grads"][name][:], two["grads"][name][:]
    assert np.abs(a - b).max() <= 1e-5 * (np.abs(a).max() + 1e-30), name
PY
expect_ok "check --ep 2 --freeze" "${mpi[@]}" "$remat" check --model mixtral --ep 2 --freeze "$P" --dropout 0.1 \
  --strategies all
"${mpi[@]}" "$remat" check "${balanced[@]}" --ep 2 --freeze-below 1 --strategies all --json >check.json 2>err.txt ||
  fail "check --freeze-below 1: $(cat err.txt)"
OMP_NUM_THREADS=1 "$remat" estimate "${balanced[@]}" --ep 2 --freeze-below 1 --strategies all --json >estimate.json \
  2>err.txt || fail "estimate --freeze-below 1: $(cat err.txt)"
py check.json estimate.json <<'PY' || fail "--ep 2 --freeze-below 1: measured is not the estimate"
import json, sys
check, estimate = (json.load(open(p)) for p in sys.argv[1:])
assert {r["strategy"]: r["activation_peak_bytes"] for r in check["strategies"]} == \
    {r["strategy"]: r["activation_peak_bytes"] for r in estimate}
PY

# QLoRA's base under the split: the frozen linear weights quantized, each expert's whole on the rank holding it
# (and bitwise one process's in the file a training writes). The gradients are one process's, every strategy is
# bitwise full with the peaks the estimate's (balanced), and a training follows one process's, what a rank holds
# as estimated.
expect_ok "grads --freeze-below 1 --quantize int8" "$remat" grads --weights mixtral.h5 --freeze-below 1 \
  --quantize int8 --out one-q.h5
expect_ok "grads --ep 2 --freeze-below 1 --quantize int8" "${mpi[@]}" "$remat" grads --weights mixtral.h5 --ep 2 \
  --freeze-below 1 --quantize int8 --out two-q.h5
close_grads one-q.h5 two-q.h5 1e-5 || fail "grads --ep 2 --quantize int8: gradients differ from one process's"
"${mpi[@]}" "$remat" check "${balanced[@]}" --ep 2 --freeze-below 1 --quantize nf4 --strategies all --json \
  >check.json 2>err.txt || fail "check --ep 2 --quantize nf4: $(cat err.txt)"
OMP_NUM_THREADS=1 "$remat" estimate "${balanced[@]}" --ep 2 --freeze-below 1 --quantize nf4 --strategies all --json \
  >estimate.json 2>err.txt || fail "estimate --ep 2 --quantize nf4: $(cat err.txt)"
py check.json estimate.json <<'PY' || fail "--ep 2 --quantize nf4: not bitwise, or measured is not the estimate"
import json, sys
check, estimate = (json.load(open(p)) for p in sys.argv[1:])
assert check["not_bitwise_exact"] == 0
measured = {r["strategy"]: r["activation_peak_bytes"] for r in check["strategies"]}
assert len(measured) >= 8 and measured == {r["strategy"]: r["activation_peak_bytes"] for r in estimate}, measured
PY
QT=(train "${balanced[@]}" --freeze-below 1 --quantize nf4 --precision fp32 --lr 3e-3 --data copy --steps 10)
expect_ok "train QLoRA base, one process" "$remat" "${QT[@]}" --out q-one.h5
expect_ok "train QLoRA base --ep 2" "${mpi[@]}" "$remat" "${QT[@]}" --ep 2 --out q-ep.h5
OMP_NUM_THREADS=1 "$remat" estimate "${balanced[@]}" --freeze-below 1 --quantize nf4 --precision fp32 --ep 2 \
  --strategies full --json >estimate.json 2>err.txt || fail "estimate --ep 2 --quantize nf4 (fp32): $(cat err.txt)"
py q-one.h5 q-ep.h5 estimate.json <<'PY' || fail "train --ep 2 --quantize nf4: off one process's run, or not as estimated"
import sys, json, h5py, numpy as np
one, ep = (h5py.File(p) for p in sys.argv[1:3])
row = json.load(open(sys.argv[3]))[0]
assert np.abs(one["history/loss"][:] - ep["history/loss"][:]).max() <= 1e-4
quantized = [n for n in one["params"] if one["params"][n].dtype == np.uint8]
assert any(".experts." in n for n in quantized) and sorted(one["params"]) == sorted(ep["params"])
for n in quantized:
    assert one["params"][n][:].tobytes() == ep["params"][n][:].tobytes(), n
held = {k: int(ep.attrs["rank_memory." + k]) for k in ("parameters", "gradients", "optimizer")}
said = {"parameters": row["parameter_bytes"] + row["quantized_bytes"], "gradients": row["gradient_bytes"],
        "optimizer": row["optimizer_bytes"]}
assert held == said, (held, said)
PY

# 4. Training under --ep 2 follows one process's losses within 1e-4 over 100 steps, its communication as
# predicted, and writes the whole model; so does --ep 2 beside data parallelism on four ranks against
# --accumulate 2; killed and resumed, a run ends bitwise as one left alone.
T=(train --model mixtral --preset tiny --lr 3e-3 --grad-clip 1 --data copy --steps 100)
"$remat" "${T[@]}" --out one-run.h5 >/dev/null 2>err.txt || fail "train, one process: $(cat err.txt)"
expect_ok "train --ep 2" "${mpi[@]}" "$remat" "${T[@]}" --ep 2 --out ep-run.h5
grep -q "expert-parallel 2" out.txt || fail "train: the layout is not said: $(cat out.txt)"
follows() {  # follows ONE SPLIT: the split run's 100 losses within 1e-4 of ONE's, its communication as predicted
  py "$1" "$2" <<'PY'
import sys, h5py, numpy as np
one, two = (h5py.File(p) for p in sys.argv[1:])
a, b = one["history/loss"][:], two["history/loss"][:]
assert len(a) == len(b) == 100 and np.abs(a - b).max() <= 1e-4, np.abs(a - b).max()
sent, predicted = two["history/comm_bytes"][:], two["history/predicted_comm_bytes"][:]
assert (sent > 0).all() and (sent == predicted).all(), (sent[:3], predicted[:3])
assert sorted(one["params"]) == sorted(two["params"]), "not the whole model's weights"
for k in one["optimizer"]:
    assert sorted(one["optimizer"][k]) == sorted(two["optimizer"][k]), k
PY
}
follows one-run.h5 ep-run.h5 || fail "train --ep 2: off one process's trajectory, or its communication"
"$remat" "${T[@]}" --freeze "$P" --out one-frozen-run.h5 >/dev/null 2>err.txt || fail "train --freeze: $(cat err.txt)"
expect_ok "train --ep 2 --freeze" "${mpi[@]}" "$remat" "${T[@]}" --ep 2 --freeze "$P" --out ep-frozen-run.h5
follows one-frozen-run.h5 ep-frozen-run.h5 || fail "train --ep 2 --freeze: off one process's trajectory"
py one-frozen-run.h5 ep-frozen-run.h5 <<'PY' || fail "train --ep 2 --freeze: a frozen weight moved"
import sys, h5py
one, two = (h5py.File(p) for p in sys.argv[1:])
frozen = [n for n in one["params"] if n.startswith("layers.0.") or ".experts.3." in n]
assert len(frozen) == 22 and not any(n in two["optimizer/m"] for n in frozen)
for n in frozen:
    assert one["params"][n][:].tobytes() == two["params"][n][:].tobytes(), n
PY
# Expert parallelism 2 x data parallelism 2 on four ranks: one process with --accumulate 2.
"$remat" "${T[@]}" --accumulate 2 --out acc-run.h5 >/dev/null 2>err.txt || fail "train --accumulate 2: $(cat err.txt)"
mpi_ranks "$mpiexec" 4
expect_ok "train --ep 2 on 4 ranks" "${mpi[@]}" "$remat" "${T[@]}" --ep 2 --out epdp-run.h5
mpi_ranks "$mpiexec" 2
grep -q "x 2 ranks, each expert-parallel 2" out.txt || fail "train: the layout on 4 ranks is not said: $(cat out.txt)"
follows acc-run.h5 epdp-run.h5 || fail "train --ep 2 on 4 ranks: off one process's --accumulate 2, or its communication"
# Expert parallelism 2 x ZeRO-3 over the data group (4 ranks): bitwise ep 2 x data 2, at fp32 and bf16;
# communication as predicted; what a rank holds as `estimate --ep 2 --ranks 2 --shard-params` says (the
# activations where the routing is balanced: 2 experts, both chosen).
sample precisions 1 fp32 bf16  # one of the two a run (lib.sh's `sample`)
for precision in "${precisions[@]}"; do
  Z=(train --model mixtral --preset tiny --experts 2 --top-k 2 --lr 3e-3 --grad-clip 0.05 --data copy --steps 3
     --accumulate 2 --ep 2 --strategy per-layer --precision "$precision")
  mpi_ranks "$mpiexec" 4
  "${mpi[@]}" "$remat" "${Z[@]}" --out epdp.h5 --force >/dev/null 2>err.txt || fail "train $precision: $(cat err.txt)"
  "${mpi[@]}" "$remat" "${Z[@]}" --shard-params --out epzero.h5 --force >/dev/null 2>err.txt ||
    fail "train $precision --shard-params: $(cat err.txt)"
  # Killed after its first save and resumed sharded: each rank its experts' and shared layers' shards.
  if [ "$precision" = fp32 ]; then
    cut_at_first_save cut-zero.h5 "${mpi[@]}" "$remat" "${Z[@]}" --shard-params --save-every 1 --out cut-zero.h5
    expect_ok "train --ep 2 --shard-params --resume" "${mpi[@]}" "$remat" "${Z[@]}" --shard-params --save-every 1 \
      --out cut-zero.h5 --resume
    grep -Eq "resuming cut-zero.h5 at step [12] of 3" out.txt || fail "--ep 2 --shard-params: not resumed mid-way: $(cat out.txt)"
    same_run epzero.h5 cut-zero.h5 || fail "train --ep 2 --shard-params, killed and resumed, is not the run left alone"
  fi
  mpi_ranks "$mpiexec" 2
  OMP_NUM_THREADS=1 "$remat" estimate "${balanced[@]}" --ep 2 --ranks 2 --shard-params --precision "$precision" \
    --strategies per-layer --json >estimate.json 2>err.txt || fail "estimate: $(cat err.txt)"
  py epdp.h5 epzero.h5 estimate.json <<'PY' || fail "$precision: --ep 2 --shard-params is not --ep 2 x data 2, or its estimate"
import sys, json, h5py
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
for key in ("loss", "grad_norm", "activation_peak"):
    assert a["history/" + key][:].tobytes() == b["history/" + key][:].tobytes(), key
for name in a["params"]:
    assert a["params"][name][:].tobytes() == b["params"][name][:].tobytes(), name
for k in a["optimizer"]:
    for name in a["optimizer"][k]:
        assert a["optimizer"][k][name][:].tobytes() == b["optimizer"][k][name][:].tobytes(), (k, name)
PY
  state_as_estimated epzero.h5 estimate.json || fail "$precision: --ep 2 --shard-params holds or sends other than estimated"
done
K=(train --model mixtral --preset tiny --seq 128 --batch 8 --lr 3e-3 --grad-clip 1 --data copy --ep 2
   --strategy per-layer --dropout 0.1 --steps 100 --save-every 10)
"${mpi[@]}" "$remat" "${K[@]}" --out whole-run.h5 >/dev/null 2>err.txt || fail "train --ep 2: $(cat err.txt)"
cut_at_first_save cut-run.h5 "${mpi[@]}" "$remat" "${K[@]}" --out cut-run.h5
expect_ok "train --ep 2 --resume" "${mpi[@]}" "$remat" "${K[@]}" --out cut-run.h5 --resume
grep -Eq "resuming cut-run.h5 at step ([1-9]|[1-9][0-9]) of 100" out.txt ||
  fail "the killed run did not resume mid-way: $(cat out.txt)"
same_run whole-run.h5 cut-run.h5 || fail "train --ep 2, killed and resumed, is not the run left alone"

# 5. time takes the layout.
expect_ok "time --ep 2" "${mpi[@]}" "$remat" time --model mixtral --preset tiny --ep 2 --strategy per-layer --steps 1 \
  --warmup 0
grep -q "expert-parallel over 2 ranks" out.txt || fail "time --ep does not say the layout: $(cat out.txt)"

# 6. Bad layouts: one line, exit 2.
expect_error "does not divide the experts E = 4" "$remat" estimate --model mixtral --preset tiny --ep 3
expect_error "gpt2 has none" "$remat" check --model gpt2 --ep 2
expect_error "does not divide the batch B = 3" "$remat" estimate --model mixtral --preset tiny --batch 3 --ep 2
expect_error "--tp 2 --ep 2 runs on a multiple of 4 ranks" "$remat" check --model mixtral --ep 2 --tp 2
expect_error "runs on a multiple of 2 ranks" "$remat" check --model mixtral --ep 2
# Budgets: one plan for every rank from the profile agreed over the group (a block's totals as their parts and a
# rest, each the ranks' largest), so each rank's peak stays within it (run_step fails a step over its budget);
# and rank 0's measured peak is what its own probe predicts for the plan. Not yet in train (each batch routes
# anew).
for n in 2 4; do
  launch=("${mpi[@]}")
  [ "$n" = 4 ] && launch=("${mpi4[@]}")
  expect_ok "check --ep $n budgets" "${launch[@]}" "$remat" check --model mixtral --ep "$n" --batch 4 --seq 64 \
    --strategies budget:min,budget:auto,budget:0.9M --json
  py out.txt <<'PY' || fail "check --ep $n budgets: not bitwise, or rank 0's peak not the plan's: $(head -c 300 out.txt)"
import sys, json
rows = json.load(open(sys.argv[1]))["strategies"]
assert len(rows) >= 6 and all(r["bitwise"] for r in rows)
assert all(r["activation_peak_bytes"] == r["predicted_peak_bytes"] for r in rows if r["strategy"] != "full")
PY
done
# With dropout the planner's probe draws the step's masks (drawn before the router, they decide the routing).
expect_ok "check --ep 2 budgets, dropout" "${mpi[@]}" "$remat" check --model mixtral --ep 2 --batch 4 --seq 64 \
  --dropout 0.1 --strategies all,budget:min,budget:0.9M --json
py out.txt <<'PY' || fail "check --ep 2 with dropout: not bitwise, or rank 0's peak not predicted: $(head -c 300 out.txt)"
import sys, json
rows = json.load(open(sys.argv[1]))["strategies"]
assert all(r["bitwise"] for r in rows) and all(r["activation_peak_bytes"] == r["predicted_peak_bytes"] for r in rows)
PY
"${mpi[@]}" "$remat" train --model mixtral --preset tiny --ep 2 --strategy budget:min --steps 1 >out.txt 2>err.txt
[ $? -eq 2 ] && grep -q -- "--ep with budget:min in train: not yet" err.txt || fail "train --ep budget: $(cat err.txt)"
expect_error "has no experts" "$remat" estimate --model llama --experts 2
"${mpi[@]}" "$remat" train --model mixtral --preset tiny --ep 2 --shard-params --steps 1 >out.txt 2>err.txt
[ $? -eq 2 ] && grep -q -- "--shard-params shards the parameters" err.txt || fail "train --ep 2 --shard-params on 2: $(cat err.txt)"

finish ep
