#!/usr/bin/env bash
# Tensor parallelism over 2 ranks (docs/scale-out.md): `mpirun -n 2 remat
# grads --tp 2` gives the whole model's loss and gradients within float32
# reduction tolerance of one process (row-parallel and vocabulary-parallel
# sums change order); every exact strategy stays bitwise `full` under the
# split, with and without dropout; bad layouts are refused in one line.
#   tp_test.sh path/to/remat path/to/mpiexec
set -uo pipefail
source "$(dirname "$0")/lib.sh"
remat=$1
mpiexec=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mpi=("$mpiexec" --oversubscribe -n 2)
[ "$(id -u)" -eq 0 ] && mpi=("$mpiexec" --allow-run-as-root --oversubscribe -n 2)

for model in gpt2 llama; do
  # 1. The split model's gradients are the whole model's.
  "$remat" export --model "$model" --preset tiny --out "$model.h5" >/dev/null 2>err.txt || fail "export: $(cat err.txt)"
  expect_ok "$model grads, one process" "$remat" grads --weights "$model.h5" --out one.h5
  expect_ok "$model grads --tp 2" "${mpi[@]}" "$remat" grads --weights "$model.h5" --tp 2 --out two.h5
  [ "$(grep -c '^loss' out.txt)" -eq 1 ] || fail "$model: more than one rank printed: $(cat out.txt)"
  "${PYTHON:-python3}" - one.h5 two.h5 <<'PY' || fail "$model: --tp 2 gradients differ from one process's"
import sys, h5py, numpy as np
one, two = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
l1, l2 = float(one["loss"][()]), float(two["loss"][()])
assert abs(l1 - l2) <= 1e-6 * abs(l1), (l1, l2)
assert sorted(one["grads"]) == sorted(two["grads"])
for name in one["grads"]:
    a, b = one["grads"][name][:], two["grads"][name][:]
    assert a.shape == b.shape, (name, a.shape, b.shape)
    scale = np.abs(a).max() + 1e-30
    assert np.abs(a - b).max() <= 1e-5 * scale, (name, np.abs(a - b).max() / scale)
PY
  # 2. Every strategy under the split: exact ones bitwise full, memory as predicted.
  for dropout in 0 0.1; do
    expect_ok "$model check --tp 2 --dropout $dropout" "${mpi[@]}" "$remat" check --model "$model" --tp 2 \
      --dropout "$dropout" --strategies all
  done
done

# 3. Bad layouts: one line, exit 2.
expect_error "does not divide the attention heads H = 4" "$remat" check --model gpt2 --tp 3
expect_error "runs on 2 ranks" "$remat" check --model gpt2 --tp 2
expect_error "bert is not split by tensor parallelism yet" "$remat" check --model bert --tp 2
finish tp_test
