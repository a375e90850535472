#!/usr/bin/env bash
# remat against the independent PyTorch implementation of docs/models.md:
#   check_model.sh path/to/remat MODEL PRESET
set -euo pipefail
remat=$1 model=$2 preset=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$remat" export --model "$model" --preset "$preset" --seed 1 --out "$work/w.h5"
"$remat" grads --weights "$work/w.h5" --out "$work/r.h5"
"${PYTHON:-python3}" "$here/models_reference.py" "$work/w.h5" "$work/r.h5"
