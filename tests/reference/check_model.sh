#!/usr/bin/env bash
# remat against the independent PyTorch implementation of docs/models.md:
#   check_model.sh path/to/remat MODEL PRESET [PRECISION]
# fp32 (default): remat's gradients equal float64's (models_reference.py).
# bf16: remat's bf16 is no further from float64 than 1.5 x PyTorch's own
# autocast(bf16) on the same weights and batch (precision_reference.py).
# On small (12 layers of the same code), a run checks 2 layers at small's
# widths, length and batch (one layer feeding another, as every later one
# does), and all 12 one time in 7, drawn per run: the
# seed is printed, and REMAT_SAMPLE_SEED=N repeats the draw (0 always draws
# all 12).
set -euo pipefail
remat=$1 model=$2 preset=$3 precision=${4:-fp32}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
depth=()
if [ "$preset" = small ]; then
  seed=${REMAT_SAMPLE_SEED:-$((RANDOM * 32768 + RANDOM))}
  if [ $((seed % 7)) -ne 0 ]; then
    depth=(--layers 2); echo "sample seed $seed: 2 of small's layers"
  else
    echo "sample seed $seed: every layer of small"
  fi
fi
"$remat" export --model "$model" --preset "$preset" "${depth[@]}" --seed 1 --out "$work/w.h5"
"$remat" grads --weights "$work/w.h5" --precision "$precision" --out "$work/r.h5"
if [ "$precision" = fp32 ]; then
  "${PYTHON:-python3}" "$here/models_reference.py" "$work/w.h5" "$work/r.h5"
else
  "${PYTHON:-python3}" "$here/precision_reference.py" "$work/w.h5" "$work/r.h5"
fi
