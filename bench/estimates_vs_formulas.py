#!/usr/bin/env python3
"""remat's exact activation peaks for LLaMA-7B beside the textbook formulas
(the Markdown tables of docs/estimates.md).

    /usr/bin/python3 bench/estimates_vs_formulas.py [build/remat] [fp32|bf16]

For S in 512 .. 8192 and B in 1, 4, 8, under no checkpointing (full), sqrt,
per-layer, Megatron's selective (selective:attn-core) and remat's broader
selective: remat's activation peak (a shape-only run, exact, with
the fused attention kernel and with the plain one) beside

- the textbook per-layer sum, as the well-known LLaMA-7B tables make it: per
  block the norm inputs and outputs, q, k, v, the s x s scores and their
  softmax, the attention output, the FFN's gate, up, activation and product;
  times L for no checkpointing, times (L / sqrt(L) + sqrt(L)) for sqrt;
  per-layer keeps each block's input plus one block's sum; selective
  (Megatron's) drops the scores and softmax;
- Korthikanti et al. (2022): s b h (34 + 5 a s / h) bytes per block at 16 bit
  (selective: 34 s b h; full recomputation: 2 s b h per block);

At fp32 (the default) every column counts 4-byte elements, as remat then
keeps them: the textbook sum is elements x 4; Korthikanti's bytes x 2 (its
1-byte dropout masks, which LLaMA has none of, become 2 bytes: an upper
bound by 2 s b h per block). At bf16 remat runs `--precision bf16` and the
formulas count their own 16-bit bytes: the textbook sum elements x 2,
Korthikanti's bytes as the paper has them.
"""
import json
import math
import subprocess
import sys

remat = sys.argv[1] if len(sys.argv) > 1 else "build/remat"
precision = sys.argv[2] if len(sys.argv) > 2 else "fp32"
E = 4 if precision == "fp32" else 2  # bytes per element on the formulas' side
L, h, a, kv, f = 32, 4096, 32, 32, 11008  # llama-7b (docs/models.md)
SEQS, BATCHES = [512, 1024, 2048, 4096, 8192], [1, 4, 8]
STRATEGIES = ["full", "sqrt", "per-layer", "selective:attn-core", "selective"]


def remat_peaks(kernel):
    out = subprocess.run([remat, "estimate", "--config", "llama-7b", "--seq", ",".join(map(str, SEQS)),
                          "--allow-longer", "--batch", ",".join(map(str, BATCHES)), "--strategies",
                          ",".join(STRATEGIES), "--attention", kernel, "--precision", precision, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return {(r["strategy"], r["seq"], r["batch"]): r["activation_peak_bytes"] for r in json.loads(out)}


def textbook(strategy, s, b):
    sbh = s * b * h
    block = E * (sbh * (2 + 2 + 1 + 2 * kv / a) + 4 * s * b * f + 2 * a * s * s * b)
    scores = E * 2 * a * s * s * b
    if strategy == "full":
        return L * block
    if strategy == "sqrt":
        return block * (L / math.sqrt(L) + math.sqrt(L))
    if strategy == "per-layer":
        return L * E * sbh + block
    if strategy == "selective:attn-core":  # Megatron's selective: the attention core dropped
        return L * (block - scores)
    return None  # remat's broader selective has no textbook counterpart


def korthikanti(strategy, s, b):
    sbh = s * b * h
    if strategy == "full":
        per = sbh * (34 + 5 * a * s / h)
    elif strategy == "selective:attn-core":
        per = 34 * sbh
    elif strategy == "per-layer":
        per = 2 * sbh
    else:
        return None  # the paper gives no sqrt figure
    return (E // 2) * L * per  # 16-bit bytes (doubled for 4-byte elements at fp32)


gib = lambda x: f"{x / 2**30:.2f}" if x is not None else "-"
fused, plain = remat_peaks("fused"), remat_peaks("plain")
for strategy in STRATEGIES:
    print(f"\n**{strategy}** (GiB)\n")
    print("| S | B | remat, fused attention | remat, plain attention | textbook sum | Korthikanti |")
    print("|---|---|---|---|---|---|")
    for s in SEQS:
        for b in BATCHES:
            k = (strategy, s, b)
            print(f"| {s} | {b} | {gib(fused[k])} | {gib(plain[k])} | {gib(textbook(strategy, s, b))} | "
                  f"{gib(korthikanti(strategy, s, b))} |")
