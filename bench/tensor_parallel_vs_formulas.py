#!/usr/bin/env python3
"""remat's exact activation bytes per layer and per rank under tensor and
sequence parallelism, beside Korthikanti et al. 2022's formulas (the Markdown
table of docs/estimates.md).

    /usr/bin/python3 bench/tensor_parallel_vs_formulas.py [build/remat]

For the four models Korthikanti et al. train (megatron-22b, gpt3-175b,
mt-nlg-530b, megatron-1t: t 8, s 2048, b 1) and llama-70b (t 8, s 4096, b 1),
one transformer layer's activation bytes on one rank, at 16 bits
(`--precision bf16`), in four layouts: no parallelism, tensor parallelism
(t 8), tensor and sequence parallelism, and the latter with selective
recomputation. remat's figure is a shape-only run's activation peak with
L + 1 layers less the one with L (the peak is at the start of backward, where
every layer's saved tensors are live, so the difference is one layer's), with
the plain attention kernel (it keeps the softmax, as the formulas do) and the
fused one (remat's default: no s x s tensor). The formula's bytes per layer:

    none          s b h (34 + 5 a s / h)
    tp            s b h (10 + 24 / t + 5 a s / (h t))
    tp + sp       s b h / t (34 + 5 a s / h)
    + selective   34 s b h / t

remat's selective in the last row is `selective:attn-core,norm` (the
attention core recomputed as Megatron's selective does, and the norms'
outputs, whose sequence-parallel all-gather is then performed again in
backward, as Megatron always does under sequence parallelism).
"""
import json
import subprocess
import sys

remat = sys.argv[1] if len(sys.argv) > 1 else "build/remat"
CONFIGS = [("megatron-22b", 2048), ("gpt3-175b", 2048), ("mt-nlg-530b", 2048), ("megatron-1t", 2048),
           ("llama-70b", 4096)]
SIZES = {"megatron-22b": (6144, 64), "gpt3-175b": (12288, 96), "mt-nlg-530b": (20480, 128),
         "megatron-1t": (25600, 160), "llama-70b": (8192, 64)}
T, B, L = 8, 1, 16
LAYOUTS = [("none", [], "full"), ("tp 8", ["--tp", str(T)], "full"), ("tp 8 + sp", ["--tp", str(T), "--sp"], "full"),
           ("tp 8 + sp + selective", ["--tp", str(T), "--sp"], "selective:attn-core,norm")]


def peak(config, seq, layers, layout, strategy, attention):
    out = subprocess.run([remat, "estimate", "--config", config, "--seq", str(seq), "--batch", str(B), "--layers",
                          str(layers), "--precision", "bf16", "--attention", attention, "--strategies", strategy,
                          "--json"] + layout, check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]["activation_peak_bytes"]


def per_layer(config, seq, layout, strategy, attention):
    return peak(config, seq, L + 1, layout, strategy, attention) - peak(config, seq, L, layout, strategy, attention)


def formula(name, s, h, a):
    sbh, t = s * B * h, T
    return {"none": sbh * (34 + 5 * a * s / h), "tp 8": sbh * (10 + 24 / t + 5 * a * s / (h * t)),
            "tp 8 + sp": sbh / t * (34 + 5 * a * s / h), "tp 8 + sp + selective": 34 * sbh / t}[name]


def main():
    gib = float(1 << 30)
    print("| model | s | layout | remat, plain attention | remat, fused attention | Korthikanti | plain / formula |")
    print("|---|---|---|---|---|---|---|")
    for config, seq in CONFIGS:
        h, a = SIZES[config]
        for name, layout, strategy in LAYOUTS:
            plain = per_layer(config, seq, layout, strategy, "plain")
            fused = per_layer(config, seq, layout, strategy, "fused")
            f = formula(name, seq, h, a)
            print(f"| {config} | {seq} | {name} | {plain / gib:.3f} | {fused / gib:.3f} | {f / gib:.3f} | "
                  f"{plain / f:.2f} |")


if __name__ == "__main__":
    main()
