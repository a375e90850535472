#!/usr/bin/env python3
"""remat's quantized weights against an implementation written from the QLoRA
paper (Dettmers et al. 2023) and docs/fine-tuning.md, in PyTorch float32 (no
bitsandbytes):

    quantize_reference.py path/to/remat

For llama and gpt2 `small` (weights from remat's seeded initialisation, through
a Hugging Face folder), at nf4 and int8:
- `remat import --quantize` quantizes exactly the linear weights of the blocks;
- its bytes equal this file's quantization of the same float32 weights, byte
  for byte (codes, absmax codes, second-level scales, mean);
- the values remat computes from them (`remat export-hf` writes them
  dequantized; `remat import` reads them back bitwise) equal this file's
  dequantization, value for value.
"""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

BLOCK = 64        # weights per absmax
SCALE_BLOCK = 256  # nf4: absmax values per second-level scale

# The 16 NormalFloat levels (QLoRA, Appendix E).
NF4 = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                    0.44070982775878906, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=torch.float32)


def pad4(n):
    return (n + 3) // 4 * 4


def code8(v, scale):
    """round(v / scale * 127), ties to even, clamped to +-127; 0 where scale is 0."""
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = torch.clamp(torch.round((v / safe) * 127.0), -127, 127)
    return torch.where(scale == 0, torch.zeros_like(q), q).to(torch.int8)


def quantize(w, fmt):
    w = torch.as_tensor(w, dtype=torch.float32).reshape(-1)
    blocks = w.reshape(-1, BLOCK)
    absmax = blocks.abs().max(dim=1).values
    if fmt == "int8":
        codes = code8(blocks, absmax[:, None]).reshape(-1)
        return codes.numpy().view(np.uint8).tobytes() + absmax.numpy().astype("<f4").tobytes()
    # nf4: the nearest level, a tie to the lower one
    x = torch.where(absmax[:, None] == 0, torch.zeros_like(blocks), blocks / absmax[:, None]).reshape(-1)
    mids = (NF4[:-1] + NF4[1:]) * 0.5
    codes = (x[:, None] > mids[None, :]).sum(dim=1).to(torch.uint8)
    packed = (codes[0::2] << 4) | codes[1::2]
    # double quantization: absmax less its mean (float64 sum), 8 bits per value,
    # a float32 scale per 256 of them
    mean = torch.tensor(absmax.double().sum().item() / absmax.numel(), dtype=torch.float32)
    centred = absmax - mean
    groups = []
    scales = []
    for g in range(0, centred.numel(), SCALE_BLOCK):
        part = centred[g:g + SCALE_BLOCK]
        s = part.abs().max()
        scales.append(s)
        groups.append(code8(part, s))
    absmax_codes = torch.cat(groups).numpy().view(np.uint8).tobytes()
    out = packed.numpy().tobytes()
    out += b"\0" * (pad4(len(out)) - len(out))
    out += absmax_codes + b"\0" * (pad4(len(absmax_codes)) - len(absmax_codes))
    out += torch.stack(scales).numpy().astype("<f4").tobytes() + mean.numpy().astype("<f4").tobytes()
    return out


def dequantize(data, n, fmt):
    data = np.frombuffer(data, dtype=np.uint8)
    blocks = n // BLOCK
    if fmt == "int8":
        codes = torch.from_numpy(data[:n].view(np.int8).astype(np.float32))
        absmax = torch.from_numpy(data[n:n + 4 * blocks].view("<f4").copy())
        step = absmax / 127.0
        return (codes.reshape(-1, BLOCK) * step[:, None]).reshape(-1)
    at = pad4(n // 2)
    absmax_codes = torch.from_numpy(data[at:at + blocks].view(np.int8).astype(np.float64))
    at = pad4(at + blocks)
    groups = (blocks + SCALE_BLOCK - 1) // SCALE_BLOCK
    scales = torch.from_numpy(data[at:at + 4 * groups].view("<f4").copy())
    mean = torch.from_numpy(data[at + 4 * groups:at + 4 * groups + 4].view("<f4").copy())
    step = (scales / 127.0).repeat_interleave(SCALE_BLOCK)[:blocks].double()
    absmax = (absmax_codes * step + mean.double()).float()  # the product is exact in float64
    packed = torch.from_numpy(data[:n // 2].copy()).long()
    codes = torch.stack([packed >> 4, packed & 15], dim=1).reshape(-1)
    return (NF4[codes].reshape(-1, BLOCK) * absmax[:, None]).reshape(-1)


def linear_weights_of_blocks(model, names):
    """What docs/fine-tuning.md says --quantize takes: the 2-D linear weights inside blocks."""
    if model == "llama":
        parts = ("attention.wq", "attention.wk", "attention.wv", "attention.wo",
                 "feed_forward.w1", "feed_forward.w2", "feed_forward.w3")
    else:
        parts = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    return sorted(n for n in names if n.endswith(".weight") and any(p + ".weight" in n for p in parts))


def check(remat, work, model, fmt):
    base, hf, q, back, plain = (os.path.join(work, f"{model}-{x}")
                                for x in ("w.h5", "hf", f"{fmt}.h5", f"{fmt}-hf", f"{fmt}-plain.h5"))
    run = lambda *a: subprocess.run([remat, *a], check=True, stdout=subprocess.DEVNULL)
    if not os.path.exists(base):
        run("export", "--model", model, "--preset", "small", "--layers", "2", "--seed", "3", "--out", base)
        run("export-hf", "--weights", base, "--out", hf)
    run("import", hf, "--quantize", fmt, "--out", q)
    run("export-hf", "--weights", q, "--out", back)
    run("import", back, "--out", plain)
    with h5py.File(base, "r") as fb, h5py.File(q, "r") as fq, h5py.File(plain, "r") as fp:
        names = list(fb["params"].keys())
        quantized = sorted(n for n in fq["params"] if "quantized" in fq["params"][n].attrs)
        expected = linear_weights_of_blocks(model, names)
        assert quantized == expected, f"{model} {fmt}: quantized {quantized}, expected {expected}"
        for name in quantized:
            attr = fq["params"][name].attrs["quantized"]
            assert (attr.decode() if isinstance(attr, bytes) else attr) == fmt
            w = fb["params"][name][()]
            ours = quantize(w, fmt)
            theirs = fq["params"][name][()].tobytes()
            assert ours == theirs, f"{model} {fmt} {name}: bytes differ ({len(ours)} vs {len(theirs)})"
            values = dequantize(theirs, w.size, fmt).numpy()
            by_remat = fp["params"][name][()].reshape(-1)
            assert np.array_equal(values, by_remat), f"{model} {fmt} {name}: remat's dequantized values differ"
            err = np.abs(values - w.reshape(-1)).max() / np.abs(w).max()
            assert 0 < err < (0.16 if fmt == "nf4" else 0.005), f"{model} {fmt} {name}: error {err}"
        print(f"{model} {fmt}: {len(quantized)} weights: bytes and dequantized values equal the reference")


def main(argv):
    remat = argv[1]
    with tempfile.TemporaryDirectory() as work:
        for model in ("llama", "gpt2"):
            for fmt in ("nf4", "int8"):
                check(remat, work, model, fmt)


if __name__ == "__main__":
    main(sys.argv)
