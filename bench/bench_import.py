#!/usr/bin/env python3
"""Importing a Hugging Face model folder at scale: time against the disk, memory against the model folder.

    /usr/bin/python3 bench/bench_import.py [--remat build/remat] [--dir /tmp/remat-ckpt] [--config gpt2-1.5b]

Writes a synthetic GPT-2 model folder of a published size (gpt2-1.5b: 1.56 billion
parameters, 6.2 GB in float32) as Hugging Face's GPT2LMHeadModel would (names,
Conv1D layouts, config.json), a tensor at a time, then reports in one run:
- the disk's own rate for the same work: copying the model folder's file and
  syncing the copy (read and write of the same bytes, as import does), the
  median of three, alternating with the imports;
- `remat import` on it: seconds, its rate relative to the copy, and its peak
  resident set (Linux VmHWM, through /usr/bin/time) relative to the model folder's size.
Rates and ratios, never thresholds. Needs about 2.2x the model folder's size on disk.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

CONFIGS = {  # published sizes (docs/models.md)
    "gpt2-124m": (12, 768, 12),
    "gpt2-355m": (24, 1024, 16),
    "gpt2-774m": (36, 1280, 20),
    "gpt2-1.5b": (48, 1600, 25),
}
V, S_MAX = 50257, 1024


def tensors(L, D):
    yield "transformer.wte.weight", (V, D)
    yield "transformer.wpe.weight", (S_MAX, D)
    for i in range(L):
        h = f"transformer.h.{i}."
        yield h + "ln_1.weight", (D,)
        yield h + "ln_1.bias", (D,)
        yield h + "attn.c_attn.weight", (D, 3 * D)  # Conv1D: [in, out]
        yield h + "attn.c_attn.bias", (3 * D,)
        yield h + "attn.c_proj.weight", (D, D)
        yield h + "attn.c_proj.bias", (D,)
        yield h + "ln_2.weight", (D,)
        yield h + "ln_2.bias", (D,)
        yield h + "mlp.c_fc.weight", (D, 4 * D)
        yield h + "mlp.c_fc.bias", (4 * D,)
        yield h + "mlp.c_proj.weight", (4 * D, D)
        yield h + "mlp.c_proj.bias", (D,)
    yield "transformer.ln_f.weight", (D,)
    yield "transformer.ln_f.bias", (D,)


def write_model_folder(folder, L, D, H):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": S_MAX,
                   "n_embd": D, "n_layer": L, "n_head": H, "activation_function": "gelu_new",
                   "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}, f)
    header, offset = {}, 0
    for name, shape in tensors(L, D):
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header)
    text += " " * ((8 - len(text) % 8) % 8)
    rng = np.random.default_rng(1)
    path = os.path.join(folder, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for name, shape in tensors(L, D):
            f.write((rng.standard_normal(shape, dtype=np.float32) * 0.02).tobytes())
    return path, offset


def timed(cmd):
    t0 = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"bench_import: {' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    rss = next(int(l.split()[-1]) * 1024 for l in done.stderr.splitlines() if "Maximum resident set size" in l)
    return seconds, rss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--remat", default="build/remat")
    ap.add_argument("--dir", default="/tmp/remat-ckpt")
    ap.add_argument("--config", default="gpt2-1.5b", choices=CONFIGS)
    ap.add_argument("--keep", action="store_true", help="keep the synthetic model folder for another run")
    a = ap.parse_args()
    L, D, H = CONFIGS[a.config]
    folder = os.path.join(a.dir, a.config)
    st = os.path.join(folder, "model.safetensors")
    if not os.path.exists(st):
        print(f"writing a synthetic {a.config} model folder into {folder} ...", flush=True)
        write_model_folder(folder, L, D, H)
    size = os.path.getsize(st)
    # The disk's rate for the same work: the file copied and synced, as
    # import syncs what it writes; alternating with the imports, medians of 3.
    copies, imports, rss = [], [], 0
    out = os.path.join(a.dir, "imported.h5")
    for _ in range(3):
        target = os.path.join(a.dir, "copy.safetensors")
        seconds, _ = timed(["dd", f"if={st}", f"of={target}", "bs=16M", "conv=fsync", "status=none"])
        os.remove(target)
        copies.append(seconds)
        seconds, peak = timed([a.remat, "import", folder, "--out", out, "--force"])
        os.remove(out)
        imports.append(seconds)
        rss = max(rss, peak)
    copy, seconds = sorted(copies)[1], sorted(imports)[1]
    gb = size / 1e9
    print(f"{a.config}: model folder {gb:.2f} GB")
    print(f"  copying it (the disk: read, write, sync): {copy:.1f} s, {gb / copy:.2f} GB/s")
    print(f"  remat import:                        {seconds:.1f} s, {gb / seconds:.2f} GB/s = {copy / seconds:.2f}x the copy's rate")
    print(f"  remat import's peak resident set:    {rss / 1e9:.2f} GB = {rss / size:.2f}x the model folder")
    if not a.keep:
        shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
