#!/usr/bin/env bash
# remat across processes: `mpirun -n 2 remat matrix` runs each cell exactly
# once and rank 0 writes them all; `--shard i/n` parts joined by `remat merge`
# hold the same cells; `mpirun -n 2 remat train` is bitwise one process with
# --accumulate 2, under checkpointing and dropout, and its recorded
# communication equals the prediction byte for byte; bad shards and merges
# are refused in one line; --shard-params (ZeRO-3) trains bitwise as
# unsharded data parallel and communicates exactly what it predicts.
#   mpi_test.sh path/to/remat path/to/mpiexec
set -uo pipefail
source "$(dirname "$0")/lib.sh"
mpi_test_start "$@"  # `mpi`: two ranks on however few cores; as root Open MPI wants to be told
cells=(matrix --preset tiny --models gpt2,llama --strategies full,per-layer,sqrt,selective --steps 1 --warmup 0)

# 1. The MPI matrix: 8 cells, each once, all in rank 0's file.
"${mpi[@]}" "$remat" "${cells[@]}" --out mpi.h5 >out.txt 2>err.txt || fail "mpirun matrix: $(cat err.txt)"
grep -q "2 MPI ranks share the 8 runs" out.txt || fail "the MPI matrix does not say how it shares the runs: $(cat out.txt)"
py mpi.h5 8 <<'PY' || fail "the MPI matrix's file does not hold each cell once"
import sys, h5py
f = h5py.File(sys.argv[1])
keys = [f["runs"][r].attrs["key"] for r in f["runs"]]
assert len(keys) == int(sys.argv[2]) and len(set(keys)) == len(keys), keys
assert {int(f["runs"][r].attrs["threads"]) for r in f["runs"]} == {1}, "each rank should take its share of 2 cores"
PY
"${mpi[@]}" "$remat" "${cells[@]}" --out mpi.h5 --resume >out.txt 2>err.txt || fail "mpirun matrix --resume: $(cat err.txt)"
py -c "import h5py,sys; assert len(h5py.File('mpi.h5')['runs']) == 8" || fail "--resume under MPI ran cells again"

# 2. Shards of a job array, merged: the same 8 cells.
"$remat" "${cells[@]}" --shard 0/3 --out p0.h5 >/dev/null 2>&1 || fail "shard 0/3"
"$remat" "${cells[@]}" --shard 1/3 --out p1.h5 >/dev/null 2>&1 || fail "shard 1/3"
"$remat" "${cells[@]}" --shard 2/3 --out p2.h5 >/dev/null 2>&1 || fail "shard 2/3"
"$remat" merge p0.h5 p1.h5 p2.h5 --out all.h5 >out.txt 2>err.txt || fail "merge: $(cat err.txt)"
grep -q "merged 8 runs from 3 files" out.txt || fail "merge did not join 8 runs: $(cat out.txt)"
py all.h5 mpi.h5 <<'PY' || fail "the merged shards do not hold the MPI matrix's cells"
import sys, h5py
a, b = (sorted(h5py.File(p)["runs"][r].attrs["key"] for r in h5py.File(p)["runs"]) for p in sys.argv[1:])
assert a == b, (a, b)
PY
"$remat" report all.h5 > report-merged.txt && "$remat" report mpi.h5 > report-mpi.txt || fail "report of the joined files"
diff <(grep -c '^|' report-merged.txt) <(grep -c '^|' report-mpi.txt) >/dev/null || fail "the reports list different runs"
expect_error "both hold run" "$remat" merge p0.h5 p0.h5 --out dup.h5
expect_error "already holds a run" "$remat" merge p1.h5 --out all.h5
"$remat" export --model gpt2 --preset tiny --out w.h5 >/dev/null
expect_error "not a remat results file" "$remat" merge p0.h5 w.h5 --out x.h5
py -c "
import h5py, shutil
shutil.copy('p1.h5', 'old.h5')
with h5py.File('old.h5', 'r+') as f: f.attrs['remat_results'] = 1
" && expect_error "merge files of one version" "$remat" merge p0.h5 old.h5 --out x.h5
expect_error "the index must be from 0 to 1" "$remat" "${cells[@]}" --shard 2/2 --out x.h5
expect_error "at least 1" "$remat" "${cells[@]}" --shard 0/0 --out x.h5
[ ! -e x.h5 ] && [ ! -e dup.h5 ] || fail "a refused merge or shard left a file behind"

# 3. Data parallel training is bitwise --accumulate 2, and its communication is as predicted.
train=(train --model llama --preset tiny --steps 6 --dropout 0.1 --strategy per-layer --lr 3e-3 --weight-decay 0.1)
"${mpi[@]}" "$remat" "${train[@]}" --out dp.h5 >out.txt 2>err.txt || fail "mpirun train: $(cat err.txt)"
"$remat" "${train[@]}" --accumulate 2 --out acc.h5 >/dev/null 2>err.txt || fail "train --accumulate 2: $(cat err.txt)"
py dp.h5 acc.h5 <<'PY' || fail "2 ranks did not train bitwise as --accumulate 2"
import sys, h5py
dp, acc = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
assert dp["history/loss"][:].tobytes() == acc["history/loss"][:].tobytes(), "losses differ"
for name in acc["params"]:
    assert dp["params"][name][:].tobytes() == acc["params"][name][:].tobytes(), name
# One gather per step: every float32 gradient of the 2 ranks plus the loss, sent once and received once.
params = sum(acc["params"][n].size for n in acc["params"])
want = 2 * (4 * params + 8)
got = set(dp["history/comm_bytes"][:].tolist())
assert got == {want}, (got, want)
assert dp.attrs["train.ranks"] == b"2" or dp.attrs["train.ranks"] == "2"
PY
expect_error "was trained with ranks 2" "$remat" "${train[@]}" --out dp.h5 --resume

# fp16 on 2 ranks: the scaled gradients are summed over ranks and unscaled
# once, so it is bitwise --accumulate 2 too; an overflow on either rank skips
# the step on both (from 2^40 the first steps overflow), and the scale
# follows the same sequence.
fp16=("${train[@]}" --precision fp16 --loss-scale 1099511627776)
"${mpi[@]}" "$remat" "${fp16[@]}" --out dp16.h5 >out.txt 2>err.txt || fail "mpirun train at fp16: $(cat err.txt)"
"$remat" "${fp16[@]}" --accumulate 2 --out acc16.h5 >/dev/null 2>err.txt || fail "train at fp16 --accumulate 2: $(cat err.txt)"
py dp16.h5 acc16.h5 <<'PY' || fail "2 ranks at fp16 did not train bitwise as --accumulate 2"
import sys, h5py
dp, acc = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
for h in ("loss", "loss_scale", "skipped"):
    assert dp["history/" + h][:].tobytes() == acc["history/" + h][:].tobytes(), h
assert dp["history/skipped"][0] == 1, "2^40 did not overflow"
for name in acc["params"]:
    assert dp["params"][name][:].tobytes() == acc["params"][name][:].tobytes(), name
PY

# mixtral: its loss parts (ce, aux) and tokens per expert are exchanged too,
# and counted in the prediction; the history's parts are --accumulate 2's.
moe=(train --model mixtral --preset tiny --steps 2 --strategy per-layer --lr 3e-3)
"${mpi[@]}" "$remat" "${moe[@]}" --out moe-dp.h5 >/dev/null 2>err.txt || fail "mpirun train mixtral: $(cat err.txt)"
"$remat" "${moe[@]}" --accumulate 2 --out moe-acc.h5 >/dev/null 2>err.txt || fail "train mixtral --accumulate 2: $(cat err.txt)"
py moe-dp.h5 moe-acc.h5 <<'PY' || fail "mixtral on 2 ranks did not train bitwise as --accumulate 2, or communicated other than predicted"
import sys, h5py
dp, acc = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
assert dp["history/loss"][:].tobytes() == acc["history/loss"][:].tobytes(), "losses differ"
for part in acc["history/loss_parts"]:
    assert dp["history/loss_parts"][part][:].tobytes() == acc["history/loss_parts"][part][:].tobytes(), part
assert dp["history/comm_bytes"][:].tolist() == dp["history/predicted_comm_bytes"][:].tolist()
PY

# 4. Sharded parameters (ZeRO-3) train bitwise as unsharded data parallel,
# under full and per-layer; every step's communication is the prediction,
# and per-layer's exceeds full's by one gather of every block's parameters.
# Clipping at 0.05 scales every step's gradients (their norm is about 1): the
# sharded norm must be the unsharded one to the last bit.
zero=(train --model gpt2 --preset tiny --layers 3 --steps 3 --accumulate 2 --dropout 0.1 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.05)
for s in full per-layer; do
  "${mpi[@]}" "$remat" "${zero[@]}" --strategy $s --out dp-$s.h5 >/dev/null 2>err.txt || fail "mpirun train $s: $(cat err.txt)"
  "${mpi[@]}" "$remat" "${zero[@]}" --strategy $s --shard-params --out zero-$s.h5 >out.txt 2>err.txt ||
    fail "mpirun train --shard-params $s: $(cat err.txt)"
  grep -q "per rank (rank 0): parameter shards" out.txt || fail "--shard-params does not report what a rank holds: $(cat out.txt)"
done
py <<'PY' || fail "sharded parameters did not train bitwise as unsharded, or communicated other than predicted"
import h5py
for s in ("full", "per-layer"):
    dp, zero = h5py.File(f"dp-{s}.h5"), h5py.File(f"zero-{s}.h5")
    assert dp["history/loss"][:].tobytes() == zero["history/loss"][:].tobytes(), (s, "losses differ")
    assert dp["history/grad_norm"][:].tobytes() == zero["history/grad_norm"][:].tobytes(), (s, "gradient norms differ")
    assert min(dp["history/grad_norm"][:]) > 0.05, (s, "clipping never acted")
    for name in dp["params"]:
        assert dp["params"][name][:].tobytes() == zero["params"][name][:].tobytes(), (s, name)
    for buf in dp["optimizer"]:
        for name in dp["optimizer"][buf]:
            assert dp["optimizer"][buf][name][:].tobytes() == zero["optimizer"][buf][name][:].tobytes(), (s, buf, name)
    got, want = zero["history/comm_bytes"][:].tolist(), zero["history/predicted_comm_bytes"][:].tolist()
    assert got == want, (s, got, want)
full, per_layer = (h5py.File(f"zero-{s}.h5")["history/comm_bytes"][0] for s in ("full", "per-layer"))
params = h5py.File("zero-full.h5")["params"]
# per-layer checkpoints every block but the last (whose backward comes at once)
# one rank's shards: half of each parameter, rounded up to whole 1024-value chunks
block_values = sum(-(-params[n].size // 2048) * 1024 for n in params if n.startswith(("h.0.", "h.1.")))
# Each of the 2 micro-batches gathers those blocks once more: 4 bytes a value, sent and received.
assert per_layer - full == 2 * 2 * 4 * block_values, (per_layer - full, block_values)
PY
# A sharded run killed after its first save resumes sharded: each rank takes its shard of the saved
# whole weights and optimizer state (the tail padded as the shards are), and the run goes on bitwise.
cut=("${zero[@]}" --strategy per-layer --shard-params --save-every 1 --out cut-zero.h5)
cut_at_first_save cut-zero.h5 "${mpi[@]}" "$remat" "${cut[@]}"
expect_ok "train --shard-params --resume" "${mpi[@]}" "$remat" "${cut[@]}" --resume
grep -Eq "resuming cut-zero.h5 at step [12] of 3" out.txt || fail "--shard-params: not resumed mid-way: $(cat out.txt)"
same_run zero-per-layer.h5 cut-zero.h5 || fail "train --shard-params, killed and resumed, is not the run left alone"
# What a rank holds under --shard-params, as `remat estimate` predicts it
# from a shape-only run: shards, their gradients and optimizer state, the
# most parameters gathered whole at once and the most whole gradients
# awaiting their reduce-scatter, and the activations, to the byte.
"${mpi[@]}" "$remat" "${zero[@]}" --strategy sqrt --shard-params --out zero-sqrt.h5 >/dev/null 2>err.txt ||
  fail "mpirun train --shard-params sqrt: $(cat err.txt)"
"$remat" estimate --model gpt2 --preset tiny --layers 3 --ranks 2 --shard-params --strategies full,per-layer,sqrt \
  --json >estimate.json 2>err.txt || fail "estimate --shard-params: $(cat err.txt)"
py <<'PY' || fail "remat estimate --shard-params does not predict what a sharded rank held"
import h5py, json
for row in json.load(open("estimate.json")):
    f = h5py.File(f"zero-{row['strategy']}.h5")
    held = {k: int(f.attrs["rank_memory." + k]) for k in ("parameters", "gradients", "optimizer", "gathered_peak", "reducing_peak")}
    got = {"parameters": row["parameter_bytes"], "gradients": row["gradient_bytes"], "optimizer": row["optimizer_bytes"],
           "gathered_peak": row["gathered_peak_bytes"], "reducing_peak": row["reducing_peak_bytes"]}
    assert got == held, (row["strategy"], got, held)
    assert int(f["history/activation_peak"][-1]) == row["activation_peak_bytes"], row["strategy"]
    print(row["strategy"], "held as estimated:", held)
PY

# At bf16 a rank gathers 16-bit values (FSDP's mixed precision), never a
# whole 16-bit copy: bitwise the unsharded bf16 run, communication as
# predicted (a gather moves 2 bytes a value), and what a rank holds as the
# estimate says (no weight copy). The estimate runs on one thread, as each
# rank does here: the fused attention's workspace is per host thread.
for s in full sqrt; do
  "${mpi[@]}" "$remat" "${zero[@]}" --precision bf16 --strategy $s --out dp16-$s.h5 >/dev/null 2>err.txt ||
    fail "mpirun train bf16 $s: $(cat err.txt)"
  "${mpi[@]}" "$remat" "${zero[@]}" --precision bf16 --strategy $s --shard-params --out zero16-$s.h5 >/dev/null 2>err.txt ||
    fail "mpirun train bf16 --shard-params $s: $(cat err.txt)"
done
OMP_NUM_THREADS=1 "$remat" estimate --model gpt2 --preset tiny --layers 3 --ranks 2 --shard-params --precision bf16 \
  --strategies full,sqrt --json >estimate16.json 2>err.txt || fail "estimate --shard-params bf16: $(cat err.txt)"
py <<'PY' || fail "sharded bf16 training differs from unsharded, or from its prediction, or holds a whole 16-bit copy"
import h5py, json
for row in json.load(open("estimate16.json")):
    s = row["strategy"]
    dp, zero = h5py.File(f"dp16-{s}.h5"), h5py.File(f"zero16-{s}.h5")
    for key in ("loss", "grad_norm", "activation_peak"):
        assert dp["history/" + key][:].tobytes() == zero["history/" + key][:].tobytes(), (s, key)
    for name in dp["params"]:
        assert dp["params"][name][:].tobytes() == zero["params"][name][:].tobytes(), (s, name)
    assert zero["history/comm_bytes"][:].tolist() == zero["history/predicted_comm_bytes"][:].tolist(), s
    held = {k: int(zero.attrs["rank_memory." + k]) for k in ("parameters", "gradients", "optimizer", "gathered_peak")}
    got = {"parameters": row["parameter_bytes"], "gradients": row["gradient_bytes"], "optimizer": row["optimizer_bytes"],
           "gathered_peak": row["gathered_peak_bytes"]}
    assert got == held, (s, got, held)
    assert int(zero["history/activation_peak"][-1]) == row["activation_peak_bytes"], s
    assert row["weight_copy_bytes"] == 0, (s, row["weight_copy_bytes"])
# Half the gather bytes of fp32 (its reduce-scatter unchanged): fp32 full moves more.
assert h5py.File("zero-full.h5")["history/comm_bytes"][0] > h5py.File("zero16-full.h5")["history/comm_bytes"][0]
PY

# LoRA adapters shard like every parameter (the store finds an adapter by
# its weight's name, gathered or not): bitwise the unsharded LoRA run.
lora=(train --model llama --preset tiny --steps 3 --lora 4 --lr 3e-3 --strategy per-layer)
"${mpi[@]}" "$remat" "${lora[@]}" --out dp-lora.h5 >/dev/null 2>err.txt || fail "mpirun train --lora: $(cat err.txt)"
"${mpi[@]}" "$remat" "${lora[@]}" --shard-params --out zero-lora.h5 >/dev/null 2>err.txt ||
  fail "mpirun train --lora --shard-params: $(cat err.txt)"
sharded_as_unsharded() {  # sharded_as_unsharded DP ZERO: losses and weights bitwise, ZERO's communication predicted
  py "$1" "$2" <<'PY'
import sys, h5py
dp, zero = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
assert dp["history/loss"][:].tobytes() == zero["history/loss"][:].tobytes(), "losses differ"
for name in dp["params"]:
    assert dp["params"][name][:].tobytes() == zero["params"][name][:].tobytes(), name
assert zero["history/comm_bytes"][:].tolist() == zero["history/predicted_comm_bytes"][:].tolist()
PY
}
sharded_as_unsharded dp-lora.h5 zero-lora.h5 &&
  py -c 'import h5py; assert any(n.endswith(".lora_A") for n in h5py.File("zero-lora.h5")["params"])' ||
  fail "sharded LoRA did not train bitwise as unsharded LoRA, or communicated other than predicted"
# Frozen blocks shard too (no gradient shards, no optimizer state; a block below every trainable parameter runs
# no backward, so it is gathered once a step): the communication as predicted, and what a rank holds, LoRA's and
# the frozen run's, as `estimate --shard-params` with the same fine-tuning says.
frozen=(train --model llama --preset tiny --steps 2 --freeze-below 1 --lr 3e-3 --strategy per-layer)
"${mpi[@]}" "$remat" "${frozen[@]}" --shard-params --out zero-frozen.h5 >/dev/null 2>err.txt ||
  fail "mpirun train --freeze-below 1 --shard-params: $(cat err.txt)"
for ft in "--lora 4:zero-lora.h5" "--freeze-below 1:zero-frozen.h5"; do
  # shellcheck disable=SC2206  # the options' words
  f=(${ft%%:*})
  OMP_NUM_THREADS=1 "$remat" estimate --model llama --preset tiny --ranks 2 --shard-params "${f[@]}" \
    --strategies per-layer --json >estimate.json 2>err.txt || fail "estimate --shard-params ${f[*]}: $(cat err.txt)"
  state_as_estimated "${ft#*:}" estimate.json || fail "train ${f[*]} --shard-params: not what the estimate says"
done
expect_error "run it under mpirun with 2 or more ranks" "$remat" "${zero[@]}" --shard-params

# QLoRA on 2 ranks: the quantized base on every rank, the adapters' gradients
# gathered: bitwise --accumulate 2, communication as predicted.
qlora=(train --model llama --preset tiny --steps 3 --lora 4 --quantize nf4 --lr 3e-3 --dropout 0.1 --strategy per-layer)
"${mpi[@]}" "$remat" "${qlora[@]}" --out dp-qlora.h5 >/dev/null 2>err.txt || fail "mpirun train --quantize: $(cat err.txt)"
"$remat" "${qlora[@]}" --accumulate 2 --out acc-qlora.h5 >/dev/null 2>err.txt || fail "train --quantize --accumulate 2: $(cat err.txt)"
py <<'PY' || fail "QLoRA on 2 ranks did not train bitwise as --accumulate 2, or communicated other than predicted"
import h5py
dp, acc = h5py.File("dp-qlora.h5"), h5py.File("acc-qlora.h5")
assert dp["history/loss"][:].tobytes() == acc["history/loss"][:].tobytes(), "losses differ"
for name in acc["params"]:
    assert dp["params"][name][:].tobytes() == acc["params"][name][:].tobytes(), name
assert any("quantized" in dp["params"][n].attrs for n in dp["params"]), "nothing quantized"
assert dp["history/comm_bytes"][:].tolist() == dp["history/predicted_comm_bytes"][:].tolist()
PY
# Beside ZeRO-3 the quantized base is kept whole on every rank (never gathered), everything else sharded:
# bitwise the unsharded QLoRA run, communication as predicted, what a rank holds as `estimate --shard-params
# --quantize nf4` says, and killed and resumed bitwise.
"${mpi[@]}" "$remat" "${qlora[@]}" --shard-params --out zero-qlora.h5 >/dev/null 2>err.txt ||
  fail "mpirun train --quantize --shard-params: $(cat err.txt)"
sharded_as_unsharded dp-qlora.h5 zero-qlora.h5 ||
  fail "sharded QLoRA did not train bitwise as unsharded QLoRA, or communicated other than predicted"
OMP_NUM_THREADS=1 "$remat" estimate --model llama --preset tiny --ranks 2 --shard-params --lora 4 --quantize nf4 \
  --dropout 0.1 --strategies per-layer --json >estimate.json 2>err.txt || fail "estimate QLoRA --shard-params: $(cat err.txt)"
py zero-qlora.h5 estimate.json <<'PY' || fail "train QLoRA --shard-params: not what the estimate says"
import sys, json, h5py
b, row = h5py.File(sys.argv[1]), json.load(open(sys.argv[2]))[0]
held = {k: int(b.attrs["rank_memory." + k]) for k in ("parameters", "gradients", "optimizer", "gathered_peak", "reducing_peak")}
said = {"parameters": row["parameter_bytes"] + row["quantized_bytes"], "gradients": row["gradient_bytes"],
        "optimizer": row["optimizer_bytes"], "gathered_peak": row["gathered_peak_bytes"],
        "reducing_peak": row["reducing_peak_bytes"]}
assert held == said, (held, said)
assert int(b["history/activation_peak"][-1]) == row["activation_peak_bytes"]
PY
# (A save gathers every sharded parameter: a run that saves holds more gathered than a step does.)
expect_ok "train QLoRA --shard-params --save-every 1" "${mpi[@]}" "$remat" "${qlora[@]}" --shard-params --save-every 1 \
  --out saved-qlora.h5
cut_at_first_save cut-qlora.h5 "${mpi[@]}" "$remat" "${qlora[@]}" --shard-params --save-every 1 --out cut-qlora.h5
expect_ok "train QLoRA --shard-params --resume" "${mpi[@]}" "$remat" "${qlora[@]}" --shard-params --save-every 1 \
  --out cut-qlora.h5 --resume
same_run saved-qlora.h5 cut-qlora.h5 || fail "train QLoRA --shard-params, killed and resumed, is not the run left alone"

# A planned schedule (budget:min nests segments: block 0 is recomputed once per
# level) is one plan on every rank (rank 0's probe timings), trains bitwise as
# unsharded, keeps its activation budget (whole gradients awaiting their
# reduce-scatter and gradient shards are not activations), and communicates
# exactly what is predicted, every re-run counted.
plan=(train --model gpt2 --preset tiny --layers 6 --steps 2 --accumulate 2 --strategy budget:min)
timeout 120 "${mpi[@]}" "$remat" "${plan[@]}" --out dp-plan.h5 >/dev/null 2>err.txt || fail "mpirun train budget:min: $(cat err.txt)"
timeout 120 "${mpi[@]}" "$remat" "${plan[@]}" --shard-params --out zero-plan.h5 >/dev/null 2>err.txt ||
  fail "mpirun train budget:min --shard-params (a timeout: the ranks planned differently): $(cat err.txt)"
py <<'PY' || fail "a planned schedule under --shard-params differs from unsharded, or from its prediction"
import h5py
dp, zero = h5py.File("dp-plan.h5"), h5py.File("zero-plan.h5")
for key in ("loss", "grad_norm", "activation_peak"):
    assert dp["history/" + key][:].tobytes() == zero["history/" + key][:].tobytes(), key
for name in dp["params"]:
    assert dp["params"][name][:].tobytes() == zero["params"][name][:].tobytes(), name
assert zero["history/comm_bytes"][:].tolist() == zero["history/predicted_comm_bytes"][:].tolist()
PY
# The report puts them side by side: memory per rank, communication and its prediction, and the plot.
"$remat" report zero-full.h5 zero-per-layer.h5 dp-full.h5 --svg plots >out.txt 2>err.txt || fail "report of sharded runs: $(cat err.txt)"
grep -q "| 2 sharded |" out.txt || fail "the report does not say the run was sharded: $(cat out.txt)"
grep -q "memory/rank MiB | comm MiB/step (predicted)" out.txt || fail "the report has no memory per rank or communication: $(cat out.txt)"
[ -s plots/ranks.svg ] && grep -q "zero-per-layer (per-layer, sharded)" plots/ranks.svg || fail "no ranks.svg plotting every run"

# 5. A rank killed mid-matrix loses only its run in progress: what rank 0
# wrote stays, and --resume runs the rest, each cell once.
slow=(matrix --preset small --layers 1 --seq 64 --models gpt2,llama,bert --strategies full,per-layer,sqrt,selective --steps 6 --warmup 0)
"${mpi[@]}" "$remat" "${slow[@]}" --out killed.h5 >/dev/null 2>&1 &
job=$!
for _ in $(seq 1 300); do  # until rank 0 has written a run (at most 30 s)
  [ -e killed.h5 ] && break
  sleep 0.1
done
victim=""
for pid in $(pgrep -f "remat matrix --preset small --layers 1 --seq 64"); do
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK=1$' && victim=$pid
done
[ -n "$victim" ] && kill -9 "$victim"
wait "$job"
[ -n "$victim" ] || fail "could not find rank 1 to kill (the matrix finished first?)"
py -c "
import h5py
f = h5py.File('killed.h5')
keys = [f['runs'][r].attrs['key'] for r in f['runs']]
assert 1 <= len(keys) < 12 and len(set(keys)) == len(keys), keys
" || fail "after a rank died, the file does not hold the runs finished before (each once)"
"${mpi[@]}" "$remat" "${slow[@]}" --out killed.h5 --resume >/dev/null 2>err.txt || fail "--resume after a dead rank: $(cat err.txt)"
py -c "
import h5py
f = h5py.File('killed.h5')
keys = [f['runs'][r].attrs['key'] for r in f['runs']]
assert len(keys) == 12 and len(set(keys)) == 12, keys
" || fail "--resume after a dead rank did not finish every cell exactly once"

# 6. A matrix split over ranks: --tp 2 --sp on four ranks (two groups of two share the cells), --ep 2 and --cp 2
# on two. Each cell once, its layout in its key, name and attributes; every strategy bitwise full on every rank
# of its group; rank 0's activation peak what `estimate` with the same layout says (under --ep, where that
# assumes a balanced routing, what `check --ep 2` measures on rank 0).
strategies=full,per-layer,selective,offload
for layout in "gpt2,llama --tp 2 --sp" "mixtral --ep 2" "gpt2 --cp 2"; do
  # shellcheck disable=SC2206  # the models, then the layout's words as a user types them
  words=($layout)
  models=${words[0]} split=("${words[@]:1}")
  runner=("${mpi[@]}")
  [ "${split[0]}" = --tp ] && runner=("${mpi4[@]}")
  "${runner[@]}" "$remat" matrix --preset tiny --models "$models" --strategies $strategies --steps 1 --warmup 0 \
    "${split[@]}" --out split.h5 >out.txt 2>err.txt || fail "matrix $layout: $(cat err.txt)"
  grep -q "split over" out.txt || fail "matrix $layout does not say how the runs are split: $(cat out.txt)"
  for model in ${models//,/ }; do
    expected=("$remat" estimate)
    [ "${split[0]}" = --ep ] && expected=("${mpi[@]}" "$remat" check)
    "${expected[@]}" --model "$model" --preset tiny --strategies $strategies "${split[@]}" --json \
      >"estimate-$model.json" 2>err.txt || fail "${expected[*]} $model $layout: $(cat err.txt)"
  done
  py split.h5 "${split[*]}" estimate-*.json <<'PY' || fail "matrix $layout: runs, layout, bitwise or memory wrong"
import json, sys, h5py
f, words = h5py.File(sys.argv[1]), sys.argv[2].split()
layout = f"{words[0][2:]}={words[1]}" + (";sp=1" if "--sp" in words else "")
runs = [f["runs"][r] for r in f["runs"]]
estimates = {}  # model -> strategy -> bytes
for j in (json.load(open(p)) for p in sys.argv[3:]):  # estimate's rows, or check's object
    rows, model = (j, j[0]["model"]) if isinstance(j, list) else (j["strategies"], j["model"])
    estimates[model] = {r["strategy"]: r["activation_peak_bytes"] for r in rows}
assert len(runs) == 4 * len(estimates) and len({r.attrs["key"] for r in runs}) == len(runs), [r.name for r in runs]
for r in runs:
    assert r.attrs["layout"] == layout and r.attrs["key"].endswith(";" + layout), (r.name, r.attrs["layout"])
    assert r.name.endswith(layout.replace(";", " ")), r.name
    assert r.attrs["bitwise_equal_to_full"] == 1, r.name
    expected = estimates[r.attrs["model"]][r.attrs["strategy"]]
    assert r.attrs["activation_peak_bytes"] == expected, (r.name, r.attrs["activation_peak_bytes"], expected)
PY
  if [ "${split[0]}" = --cp ]; then  # the loss recorded is the group's, not rank 0's share of it
    "$remat" matrix --preset tiny --models gpt2 --strategies full --steps 1 --warmup 0 --out whole.h5 >/dev/null 2>&1 ||
      fail "matrix, one process"
    py split.h5 whole.h5 <<'PY' || fail "matrix --cp 2: the loss recorded is not the whole sequence's"
import sys, h5py
split, whole = (h5py.File(p) for p in sys.argv[1:])
a = next(r for r in split["runs"].values() if r.attrs["strategy"] == "full").attrs["loss"]
b = next(iter(whole["runs"].values())).attrs["loss"]
assert abs(a - b) <= 1e-6 * abs(b), (a, b)
PY
  fi
  rm -f split.h5 estimate-*.json
done

# Under mpirun an error every rank meets is one line from rank 0 and exit 2,
# not an MPI_ABORT banner (mpirun's own notice that a process exited
# non-zero may follow it); Kokkos' warnings come from rank 0 alone.
mpi_error() {  # mpi_error "fragment" remat-args...
  local fragment=$1; shift
  "${mpi[@]}" "$remat" "$@" >out.txt 2>err.txt
  local rc=$?
  [ $rc -eq 2 ] || fail "mpirun remat $*: exit $rc, expected 2 ($(cat err.txt))"
  [ "$(grep -c "^remat: error: .*$fragment" err.txt)" -eq 1 ] || fail "mpirun remat $*: not one error line: $(cat err.txt)"
  grep -q "MPI_ABORT\|(rank [0-9]" err.txt && fail "mpirun remat $*: an abort where every rank knew the error: $(cat err.txt)"
}
mpi_error "--seq" train --preset tiny --steps 1 --seq 0
# A matrix split over ranks: the layout checked per model, nothing it cannot do yet.
mpi_error "gpt2 has none" matrix --preset tiny --models gpt2,mixtral --ep 2 --out x.h5
mpi_error "--ep with --cp: not yet" matrix --preset tiny --ep 2 --cp 2 --models mixtral --out x.h5
mpi_error "runs on a multiple of 3 ranks" matrix --preset tiny --tp 3 --out x.h5
mpi_error "with --mem-limit: not yet" matrix --preset tiny --tp 2 --mem-limit 1G --out x.h5
mpi_error "--ep with --lora: not yet" matrix --preset tiny --ep 2 --models mixtral --lora 4 --out x.h5
mpi_error "'h.0.attn.c_proj.weight' \[32, 32\] splits into runs of 16 values, not whole blocks of 64" matrix \
  --preset tiny --tp 2 --freeze-below 1 --quantize int8 --out x.h5
[ ! -e x.h5 ] || fail "a refused matrix left a results file behind"
mpi_error "matches no parameter" train --preset tiny --steps 1 --freeze 'nomatch*' --out x.h5
# With mpirun -q (docs/scale-out.md) the error line and the exit code are all there is.
"${mpi[0]}" -q "${mpi[@]:1}" "$remat" train --preset tiny --steps 1 --seq 0 >out.txt 2>err.txt
rc=$?
[ $rc -eq 2 ] && [ "$(grep -c . err.txt)" -eq 1 ] && [ ! -s out.txt ] ||
  fail "mpirun -q with an error: exit $rc, not one line alone: $(cat out.txt err.txt)"
"${mpi[@]}" --tag-output "$remat" train --preset tiny --steps 1 --kokkos-num-threads=4 >out.txt 2>&1 ||
  fail "mpirun train without --out: $(cat out.txt)"
[ "$(grep -c "no --out" out.txt)" -eq 1 ] || fail "train without --out does not warn once: $(cat out.txt)"
grep -q "^\[1,0\].*WARNING" out.txt || fail "rank 0 does not pass Kokkos' warning on: $(cat out.txt)"
grep -q "^\[1,1\].*WARNING" out.txt && fail "Kokkos' warnings come once per rank: $(cat out.txt)"

finish mpi
