#!/usr/bin/env bash
# A rank grid (docs/scale-out.md): tensor parallelism (innermost) beside
# context or expert parallelism on 4 ranks. `grads --tp 2 [--sp] --cp 2`
# (gpt2, llama) and `--tp 2 [--sp] --ep 2` (mixtral) give the whole model's
# loss and gradients within float32 tolerance of one process; under --cp each
# rank's measured peaks and the bytes it sends are what `estimate` says;
# every strategy stays bitwise `full` at a fixed layout (with dropout under
# --ep); the matrix records the layout; training under --tp 2 --cp 2
# follows one process, and under --tp 2 --ep 2 also resumes bitwise after a
# kill; what does not compose yet is refused in one line.
#   grid_test.sh path/to/remat path/to/mpiexec
set -uo pipefail
source "$(dirname "$0")/lib.sh"
mpi_test_start "$@"

peaks_match() {  # peaks_match ESTIMATE.json (out.txt: grads' per-rank peaks and bytes sent)
  py "$@" out.txt <<'PY'
import sys, json, re
est, out = sys.argv[1:]
row = json.load(open(est))[0]
text = open(out).read()
ranks = re.findall(r"rank \d+: activation peak (\d+) bytes, offload peak (\d+) bytes", text)
assert len(ranks) == 4, text
for act, off in ranks:
    assert int(act) == row["activation_peak_bytes"], (act, row["activation_peak_bytes"])
    assert int(off) == row["offload_peak_bytes"], (off, row["offload_peak_bytes"])
sent = int(re.search(r"sent (\d+) bytes", text).group(1))
assert sent == row["comm_bytes"], (sent, row["comm_bytes"])
PY
}
all_bitwise() {  # all_bitwise WHAT (out.txt: check --json)
  py "$1" out.txt <<'PY' || fail "$1: a strategy is not bitwise full: $(cat out.txt)"
import sys, json
check = json.load(open(sys.argv[2]))
rows = check["strategies"]
assert check["not_bitwise_exact"] == 0 and len(rows) >= 8 and all(r["bitwise"] for r in rows), rows
PY
}

# 1. tensor x context: the whole model's gradients, and each rank's peaks as estimated.
for model in gpt2 llama; do
  "$remat" export --model "$model" --preset tiny --out "$model.h5" >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
  expect_ok "$model grads, one process" "$remat" grads --weights "$model.h5" --out one.h5
  for sp in "" --sp; do
    expect_ok "$model grads --tp 2 $sp --cp 2" "${mpi4[@]}" "$remat" grads --weights "$model.h5" --tp 2 $sp --cp 2 \
      --out grid.h5
    [ "$(grep -c '^loss' out.txt)" -eq 1 ] || fail "$model: more than one rank printed: $(cat out.txt)"
    close_grads one.h5 grid.h5 || fail "$model --tp 2 $sp --cp 2: gradients differ from one process's"
    cp out.txt grads.txt
    "$remat" estimate --model "$model" --preset tiny --tp 2 $sp --cp 2 --strategies full --json >est.json 2>err.txt ||
      fail "estimate --tp 2 $sp --cp 2: $(cat err.txt)"
    cp grads.txt out.txt
    peaks_match est.json || fail "$model --tp 2 $sp --cp 2: peaks or bytes differ from the estimate"
  done
done
expect_ok "llama check --tp 2 --sp --cp 2 bf16" "${mpi4[@]}" "$remat" check --model llama --tp 2 --sp --cp 2 \
  --precision bf16 --strategies all,budget:min --json
all_bitwise "llama --tp 2 --sp --cp 2 bf16"

# 2. tensor x expert: mixtral's experts over 2 ranks, each split over 2.
"$remat" export --model mixtral --preset tiny --out mixtral.h5 >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
expect_ok "mixtral grads, one process" "$remat" grads --weights mixtral.h5 --router-aux 1 --out one.h5
for sp in "" --sp; do
  expect_ok "mixtral grads --tp 2 $sp --ep 2" "${mpi4[@]}" "$remat" grads --weights mixtral.h5 --router-aux 1 \
    --tp 2 $sp --ep 2 --out grid.h5
  close_grads one.h5 grid.h5 || fail "mixtral --tp 2 $sp --ep 2: gradients differ from one process's"
done
expect_ok "mixtral check --tp 2 --sp --ep 2 with dropout" "${mpi4[@]}" "$remat" check --model mixtral --tp 2 --sp \
  --ep 2 --dropout 0.1 --strategies all --json
all_bitwise "mixtral --tp 2 --sp --ep 2 --dropout 0.1"

# 3. The matrix: one cell split over the grid, the layout in its key and its report row.
expect_ok "matrix --tp 2 --sp --cp 2" "${mpi4[@]}" "$remat" matrix --models llama --tp 2 --sp --cp 2 --preset tiny \
  --strategies full,per-layer --steps 1 --out grid-matrix.h5
"$remat" report grid-matrix.h5 >report.txt 2>err.txt || fail "report: $(cat err.txt)"
grep -q "per-layer \[tp 2 sp, cp 2\]" report.txt || fail "the report does not label the layout: $(cat report.txt)"
py grid-matrix.h5 <<'PY' || fail "the matrix's runs do not carry the layout"
import sys, h5py
runs = h5py.File(sys.argv[1])["runs"]
assert len(runs) == 2, list(runs)
for name in runs:
    attrs = runs[name].attrs
    assert attrs["layout"] == "tp=2;sp=1;cp=2" and attrs["key"].endswith(";tp=2;sp=1;cp=2"), dict(attrs)
PY

# 4. Training under --tp 2 --cp 2 follows one process.
expect_ok "train, one process" "$remat" train --model llama --preset tiny --steps 4 --out one-run.h5
expect_ok "train --tp 2 --cp 2" "${mpi4[@]}" "$remat" train --model llama --preset tiny --steps 4 --tp 2 --cp 2 \
  --out grid-run.h5
py one-run.h5 grid-run.h5 <<'PY' || fail "train --tp 2 --cp 2 does not follow one process"
import sys, h5py, numpy as np
one, grid = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
assert np.allclose(one["history/loss"][:], grid["history/loss"][:], rtol=1e-6, atol=0)
for n in one["params"]:
    assert np.allclose(one["params"][n][:], grid["params"][n][:], rtol=0, atol=1e-5), n
PY

# Under --tp 2 --ep 2 too (the gradient norm clipped: each expert's parts counted once over the grid), its
# communication as predicted; killed after a save and resumed, it ends bitwise as the run left alone.
T=(train --model mixtral --preset tiny --router-aux 1 --grad-clip 0.5 --steps 6 --save-every 2)
expect_ok "mixtral train, one process" "$remat" "${T[@]}" --out one-moe.h5
expect_ok "mixtral train --tp 2 --ep 2" "${mpi4[@]}" "$remat" "${T[@]}" --tp 2 --ep 2 --out grid-moe.h5
py one-moe.h5 grid-moe.h5 <<'PY' || fail "train --tp 2 --ep 2 does not follow one process"
import sys, h5py, numpy as np
one, grid = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
assert np.allclose(one["history/loss"][:], grid["history/loss"][:], rtol=1e-6, atol=0)
assert np.allclose(one["history/grad_norm"][:], grid["history/grad_norm"][:], rtol=1e-5, atol=0)
assert sorted(one["params"]) == sorted(grid["params"])
for n in one["params"]:
    assert np.allclose(one["params"][n][:], grid["params"][n][:], rtol=0, atol=1e-5), n
assert grid["history/comm_bytes"][:].tolist() == grid["history/predicted_comm_bytes"][:].tolist()
PY
cut_at_first_save cut-moe.h5 "${mpi4[@]}" "$remat" "${T[@]}" --tp 2 --ep 2 --out cut-moe.h5
expect_ok "train --tp 2 --ep 2 --resume" "${mpi4[@]}" "$remat" "${T[@]}" --tp 2 --ep 2 --out cut-moe.h5 --resume
grep -Eq "resuming cut-moe.h5 at step [24] of 6" out.txt || fail "--tp 2 --ep 2: not resumed mid-way: $(cat out.txt)"
same_run grid-moe.h5 cut-moe.h5 || fail "train --tp 2 --ep 2, killed and resumed, is not the run left alone"

# On 8 ranks the two grids train data-parallel with their parameters sharded (ZeRO-3 over the data group):
# bitwise the 4-rank grid accumulating the same two micro-batches, the norm over grid and shards alike.
mpi_ranks "$mpiexec" 8
mpi8=("${mpi[@]}")
mpi_ranks "$mpiexec" 2
Z=(train --model mixtral --preset tiny --router-aux 0 --grad-clip 0.5 --steps 3 --batch 4 --tp 2 --ep 2)
expect_ok "train --tp 2 --ep 2 --accumulate 2" "${mpi4[@]}" "$remat" "${Z[@]}" --accumulate 2 --out acc.h5
expect_ok "train --tp 2 --ep 2 --shard-params on 8" "${mpi8[@]}" "$remat" "${Z[@]}" --shard-params --out zero.h5
py acc.h5 zero.h5 <<'PY' || fail "train --tp 2 --ep 2 --shard-params is not the grid accumulating"
import sys, h5py
a, b = (h5py.File(p)["history"] for p in sys.argv[1:])
for key in ("loss", "grad_norm"):
    assert a[key][:].tobytes() == b[key][:].tobytes(), (key, a[key][:], b[key][:])
assert b["comm_bytes"][:].tolist() == b["predicted_comm_bytes"][:].tolist()
PY

# 5. What does not compose (yet): one line, exit 2.
expect_error "--ep with --cp: not yet" "$remat" estimate --model mixtral --preset tiny --ep 2 --cp 2
expect_error "--tp 2 --cp 2 runs on a multiple of 4 ranks" "$remat" check --model llama --tp 2 --cp 2
expect_error "each --cp rank's rows S / 2" "$remat" estimate --model llama --preset tiny --seq 12 --tp 4 --sp --cp 2

finish grid
