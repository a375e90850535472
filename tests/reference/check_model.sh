#!/usr/bin/env bash
# remat against the independent PyTorch implementation of docs/models.md:
#   check_model.sh path/to/remat MODEL[,MODEL...] PRESET [PRECISION]
# fp32 (default): remat's gradients equal float64's (models_reference.py).
# bf16: remat's bf16 is no further from float64 than 1.5 x PyTorch's own
# autocast(bf16) on the same weights and batch (precision_reference.py).
# The models run one after another in one Python process (torch imported
# once, not once a model: two seconds each); every one is checked, and the
# failures are named at the end.
# On small (12 layers of the same code), a model is checked on 2 layers at
# small's widths and length (one layer feeding another, as every later one
# does), and on all 12 one time in 7, drawn per run: the seed is printed, and
# REMAT_SAMPLE_SEED=N repeats the draw (0 always draws all 12). The batch is
# 2, not small's 8: every batch index takes the same path past the first, and
# the float64 reference's time grows with it (a fifth of the suite's at 8).
set -uo pipefail
remat=$1 preset=$3 precision=${4:-fp32}
IFS=, read -r -a models <<<"$2"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/lib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
script="$here/models_reference.py"
[ "$precision" = fp32 ] || script="$here/precision_reference.py"
[ "$preset" = small ] && draw_sample_seed  # lib.sh's: sample_seed, printed
failed=()
for i in "${!models[@]}"; do
  model=${models[$i]}
  shape=()
  if [ "$preset" = small ]; then
    depth="every layer of small"
    shape=(--batch 2)
    if [ "$sample_seed" -ne 0 ] && [ $(((sample_seed + i) % 7)) -ne 0 ]; then shape+=(--layers 2) depth="2 layers"; fi
    echo "$model: $depth, batch 2"
  fi
  if "$remat" export --model "$model" --preset "$preset" "${shape[@]}" --seed 1 --out w.h5 >/dev/null 2>err.txt &&
     "$remat" grads --weights w.h5 --precision "$precision" --out r.h5 >/dev/null 2>>err.txt &&
     pyrun "$script" w.h5 r.h5 2>>err.txt; then
    :
  else
    echo "FAIL: $model $preset $precision: $(cat err.txt)"
    failed+=("$model")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "reference $preset $precision: failed for ${failed[*]}"; exit 1; }
echo "reference $preset $precision: ${models[*]} agree"
