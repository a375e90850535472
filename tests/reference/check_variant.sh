#!/usr/bin/env bash
# A model variant against the independent PyTorch implementation: a tiny
# model's weight file with its attributes set as given (a checkpoint's
# norm epsilon, rotary base, Qwen2's q/k/v biases ...), its gradients from remat and from
# models_reference.py compared as check_model.sh compares them.
#   check_variant.sh path/to/remat MODEL NAME=VALUE...
set -euo pipefail
remat=$1 model=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$remat" export --model "$model" --preset tiny --seed 2 --out "$work/w.h5" >/dev/null
"${PYTHON:-python3}" - "$work/w.h5" "$@" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    for setting in sys.argv[2:]:
        name, value = setting.split("=", 1)
        if name != "qkv_bias":
            f.attrs[name] = float(value)
            continue
        # Qwen2: q, k and v biases, drawn at random (a zero bias would test nothing)
        f.attrs[name] = np.int64(value)
        rng = np.random.default_rng(5)
        for w in [n for n in f["params"] if n.endswith((".wq.weight", ".wk.weight", ".wv.weight"))]:
            out = f["params"][w].shape[0]
            f["params"][w[:-len("weight")] + "bias"] = rng.uniform(-0.5, 0.5, out).astype(np.float32)
PY
"$remat" grads --weights "$work/w.h5" --out "$work/r.h5" >/dev/null
"${PYTHON:-python3}" "$here/models_reference.py" "$work/w.h5" "$work/r.h5"
