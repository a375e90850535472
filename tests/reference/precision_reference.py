#!/usr/bin/env python3
"""remat's bf16 against PyTorch's own CPU autocast(bf16), both against float64.

    precision_reference.py WEIGHTS.h5 REMAT_BF16.h5

WEIGHTS.h5 holds the weights and batch (docs/models.md layout); REMAT_BF16.h5 what
`remat grads --precision bf16` wrote. The model is the independent PyTorch
implementation of models_reference.py, run three times on the same weights and
batch: in float64 (the reference), and in float32 under
torch.autocast("cpu", dtype=torch.bfloat16) (what a PyTorch user's bf16 training
computes). PyTorch's arithmetic is the same on every CPU, so that the verdict is: its
oneDNN (mkldnn) backend is switched off, and ATen's kernels pinned to AVX2. On a CPU
with native bf16 (AVX512-BF16, AMX) oneDNN would otherwise multiply in bf16 pairs with
its own rounding, and PyTorch's error, the yardstick, would shrink there and not
elsewhere (measured: encdec's ratio 1.51 on an AVX512-BF16 EPYC, about 0.5 on AVX2).
(Pinning oneDNN's ISA to AVX2 instead makes PyTorch 1.13 fail on such a CPU: it still
sends bf16 products to oneDNN, which then has no kernel.) So PyTorch multiplies exact
bf16 products with float32 accumulation and rounds once, as remat's widening path does;
what remains between the two is the order of float32 sums, where each rounds
activations to bf16, and on a native-bf16 CPU remat's oneDNN products. The error of a run is the largest of its loss's relative error and, over
every parameter, max |g - ref| / max |ref| (at least a millionth of the model's
largest gradient, as models_reference.py measures). Exit 0 if remat's error is at most
1.5 times PyTorch's, 1 otherwise: the same policy, rounded at slightly different
places (remat keeps every saved activation in bf16), lands within that; mixtral, whose
routing flips at 16 bits on both sides, is the closest at about 1.35. Nothing here
shares code with remat.
"""
import os
import sys

# Before torch is imported: ATen reads it once (see above).
os.environ["ATEN_CPU_CAPABILITY"] = "avx2"

import h5py
import torch

torch.backends.mkldnn.enabled = False

import models_reference as ref


def run(model, z, values, tokens, targets, dtype, autocast):
    torch.set_default_dtype(dtype)
    p = {n: torch.tensor(v, dtype=dtype, requires_grad=True) for n, v in values.items()}
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = ref.MODELS[model](p, tokens, z, targets)
        logits, extra = out if isinstance(out, tuple) else (out, 0.0)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        loss = loss + extra
    loss.backward()
    grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t)).double() for n, t in p.items()}
    return loss.item(), grads


def error(loss, grads, ref_loss, ref_grads):
    floor = 1e-6 * max(g.abs().max().item() for g in ref_grads.values())
    worst = (abs(loss - ref_loss) / abs(ref_loss), "loss")
    for n, g in grads.items():
        r = ref_grads[n]
        worst = max(worst, ((g - r).abs().max().item() / max(r.abs().max().item(), floor), n))
    return worst


def main(weights_path, result_path):
    model, z, values, tokens, targets = ref.read_weights(weights_path)
    ref_loss, ref_grads = run(model, z, values, tokens, targets, torch.float64, False)
    torch_loss, torch_grads = run(model, z, values, tokens, targets, torch.float32, True)
    with h5py.File(result_path, "r") as r:
        remat_loss = float(r["loss"][()])
        remat_grads = {n: torch.tensor(r["grads"][n][()], dtype=torch.float64) for n in r["grads"]}
    if set(remat_grads) != set(ref_grads):
        print("MISMATCH gradient names differ:", sorted(set(remat_grads) ^ set(ref_grads)))
        return 1
    torch_err = error(torch_loss, torch_grads, ref_loss, ref_grads)
    remat_err = error(remat_loss, remat_grads, ref_loss, ref_grads)
    ratio = remat_err[0] / torch_err[0]
    print(f"{model}: error against float64: remat bf16 {remat_err[0]:.3e} ({remat_err[1]}), "
          f"PyTorch autocast(bf16) {torch_err[0]:.3e} ({torch_err[1]}): ratio {ratio:.2f} (at most 1.5)")
    if ratio > 1.5:
        print("MISMATCH remat's bf16 is further from float64 than 1.5 x PyTorch's autocast")
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
