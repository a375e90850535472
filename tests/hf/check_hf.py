#!/usr/bin/env python3
"""Checks for the Hugging Face tests, sharing no code with remat.

    check_hf.py params A.h5 B.h5 [--rounded BF16|F16]
        B's parameters equal A's bitwise, or A's rounded to 16 bits and widened back.
    check_hf.py peft ADAPTER_DIR BASE_DIR MERGED_DIR
        PEFT's merge of the adapters into the base model folder (W + lora_alpha/r * B A, transposed for
        fan_in_fan_out) equals the merged model folder, tensor by tensor (float32 rounding).
Exit 0 if it holds, 1 otherwise.
"""
import json
import os
import struct
import sys

import h5py
import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:end]), dtype=DTYPES[e["dtype"]]) if end > b else torch.zeros(0, dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).float()
    return out


def read_folder(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(os.path.join(folder, "model.safetensors")):
        return read_safetensors(os.path.join(folder, "model.safetensors"))
    out = {}
    for shard in sorted(set(json.load(open(index))["weight_map"].values())):
        out.update(read_safetensors(os.path.join(folder, shard)))
    return out


def params(path):
    with h5py.File(path, "r") as f:
        return {n: torch.tensor(f["params"][n][()]) for n in f["params"]}


def check_params(a_path, b_path, rounded=None):
    a, b = params(a_path), params(b_path)
    if set(a) != set(b):
        print("names differ:", sorted(set(a) ^ set(b)))
        return 1
    bad = 0
    for n in a:
        want = a[n] if rounded is None else a[n].to(DTYPES[rounded]).float()
        if not torch.equal(want.view(torch.int32), b[n].view(torch.int32)):
            print(f"{n}: differs (max {float((want - b[n]).abs().max()):.3g})")
            bad += 1
    print(f"{len(a)} parameters compared, {bad} differ")
    return 1 if bad else 0


def check_peft(adapter_dir, base_dir, merged_dir):
    config = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    adapters = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    base, merged = read_folder(base_dir), read_folder(merged_dir)
    scale = config["lora_alpha"] / config["r"]
    prefix = "base_model.model."
    touched = set()
    worst = 0.0
    for name, A in adapters.items():
        if not name.endswith(".lora_A.weight"):
            continue
        module = name[len(prefix):-len(".lora_A.weight")]
        B = adapters[prefix + module + ".lora_B.weight"]
        assert A.shape[0] == config["r"] and B.shape[1] == config["r"], (A.shape, B.shape)
        delta = (B.double() @ A.double()) * scale
        if config["fan_in_fan_out"]:
            delta = delta.T
        w = module + ".weight"
        want = base[w].double() + delta
        worst = max(worst, float((want - merged[w].double()).abs().max() / want.abs().max()))
        touched.add(w)
    for w in base:
        if w not in touched and not torch.equal(base[w], merged[w]):
            print(f"{w}: not adapted, yet changed")
            return 1
    print(f"{len(touched)} adapted weights, PEFT's merge against remat's: worst relative error {worst:.2e}")
    return 0 if touched and worst < 1e-6 else 1


def main(argv):
    if len(argv) >= 4 and argv[1] == "params":
        rounded = argv[5] if len(argv) == 6 and argv[4] == "--rounded" else None
        return check_params(argv[2], argv[3], rounded)
    if len(argv) == 5 and argv[1] == "peft":
        return check_peft(argv[2], argv[3], argv[4])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
