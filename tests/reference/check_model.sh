#!/usr/bin/env bash
# remat against the independent PyTorch implementation of docs/models.md:
#   check_model.sh path/to/remat MODEL PRESET [PRECISION]
# fp32 (default): remat's gradients equal float64's (models_reference.py).
# bf16: remat's bf16 is no further from float64 than 1.5 x PyTorch's own
# autocast(bf16) on the same weights and batch (precision_reference.py).
set -euo pipefail
remat=$1 model=$2 preset=$3 precision=${4:-fp32}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$remat" export --model "$model" --preset "$preset" --seed 1 --out "$work/w.h5"
"$remat" grads --weights "$work/w.h5" --precision "$precision" --out "$work/r.h5"
if [ "$precision" = fp32 ]; then
  "${PYTHON:-python3}" "$here/models_reference.py" "$work/w.h5" "$work/r.h5"
else
  "${PYTHON:-python3}" "$here/precision_reference.py" "$work/w.h5" "$work/r.h5"
fi
