#!/usr/bin/env python3
"""Writes a Hugging Face model folder of a remat weight file, independently of remat.

    make_hf.py WEIGHTS.h5 OUT_DIR [--dtype F32|BF16|F16] [--shards N] [--no-prefix]
               [--buffers] [--tied-head] [--break KIND]

The names, layouts and config.json keys follow Hugging Face's GPT2LMHeadModel,
LlamaForCausalLM and MixtralForCausalLM as written from their documentation
here (nothing is shared with remat); torch converts the values; the
safetensors container (8-byte little-endian header length, JSON header, data)
is written by hand. --break writes a deliberately damaged model folder, for
the refusal tests: header-length, overlap, hole, byte-count, duplicate,
missing, extra, nan, dtype, eps, bias, tied, model-type, architecture,
index-missing, index-wrong, head-differs.
"""
import argparse
import json
import os
import re
import struct
import sys

import h5py
import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def gpt2_names(name, prefix):
    p = "transformer." if prefix else ""
    conv1d = re.match(r"^h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$", name) is not None
    return p + name, conv1d


LLAMA_RULES = [
    (r"^tok_embeddings\.weight$", "model.embed_tokens.weight"),
    (r"^layers\.(\d+)\.attention_norm\.weight$", r"model.layers.\1.input_layernorm.weight"),
    (r"^layers\.(\d+)\.attention\.wq\.weight$", r"model.layers.\1.self_attn.q_proj.weight"),
    (r"^layers\.(\d+)\.attention\.wk\.weight$", r"model.layers.\1.self_attn.k_proj.weight"),
    (r"^layers\.(\d+)\.attention\.wv\.weight$", r"model.layers.\1.self_attn.v_proj.weight"),
    (r"^layers\.(\d+)\.attention\.wo\.weight$", r"model.layers.\1.self_attn.o_proj.weight"),
    (r"^layers\.(\d+)\.ffn_norm\.weight$", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"^layers\.(\d+)\.feed_forward\.w1\.weight$", r"model.layers.\1.mlp.gate_proj.weight"),
    (r"^layers\.(\d+)\.feed_forward\.w2\.weight$", r"model.layers.\1.mlp.down_proj.weight"),
    (r"^layers\.(\d+)\.feed_forward\.w3\.weight$", r"model.layers.\1.mlp.up_proj.weight"),
    (r"^layers\.(\d+)\.block_sparse_moe\.(.*)$", r"model.layers.\1.block_sparse_moe.\2"),
    (r"^norm\.weight$", "model.norm.weight"),
    (r"^output\.weight$", "lm_head.weight"),
]


def llama_names(name, prefix):
    for pattern, repl in LLAMA_RULES:
        if re.match(pattern, name):
            return re.sub(pattern, repl, name), False
    raise SystemExit(f"make_hf: no Hugging Face name for {name}")


def config_of(model, a):
    if model == "gpt2":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": a["V"],
                "n_positions": a["S_max"], "n_embd": a["D"], "n_layer": a["L"], "n_head": a["H"], "n_inner": None,
                "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.1,
                "embd_pdrop": 0.1, "attn_pdrop": 0.1, "scale_attn_weights": True, "tie_word_embeddings": True}
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": a["V"], "hidden_size": a["D"],
         "intermediate_size": a["F"], "num_hidden_layers": a["L"], "num_attention_heads": a["H"],
         "num_key_value_heads": a["Hkv"], "hidden_act": "silu", "max_position_embeddings": a["S_max"],
         "rms_norm_eps": 1e-5, "rope_theta": float(a.get("theta", 10000.0)), "rope_scaling": None,
         "attention_bias": False, "tie_word_embeddings": False}
    if model == "mixtral":
        c.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": a["E"],
                  "num_experts_per_tok": a["K"], "router_aux_loss_coef": 0.01, "sliding_window": None})
    return c


def header_json(entries):
    return json.dumps(entries, separators=(",", ":"))


def write_safetensors(path, tensors, broken=None):
    """tensors: list of (name, torch tensor)."""
    entries, blobs, offset = {}, [], 0
    for name, t in tensors:
        data = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        dtype = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}[t.dtype]
        entries[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    first = next(iter(entries))
    if broken == "overlap":
        e = entries[first]
        e["data_offsets"] = [0, e["data_offsets"][1]]
        second = list(entries)[1]
        entries[second]["data_offsets"] = [e["data_offsets"][1] - 4, entries[second]["data_offsets"][1] - 4]
    if broken == "byte-count":
        entries[first]["shape"] = entries[first]["shape"][:-1] + [entries[first]["shape"][-1] + 1]
    if broken == "dtype":
        entries[first]["dtype"] = "F64"
    text = header_json(entries)
    if broken == "duplicate":  # the same name twice: a JSON parser keeps the last, silently
        text = text[:-1] + "," + json.dumps(first) + ":" + json.dumps(entries[first]) + "}"
    text += " " * ((8 - len(text) % 8) % 8)
    data = b"".join(blobs)
    if broken == "hole":
        data += b"\0" * 8
    length = len(text.encode())
    if broken == "header-length":
        length = len(text.encode()) + len(data) + 100
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", length))
        f.write(text.encode())
        f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("weights")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="F32", choices=DTYPES)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--no-prefix", action="store_true")
    ap.add_argument("--buffers", action="store_true")
    ap.add_argument("--tied-head", action="store_true")
    ap.add_argument("--break", dest="broken", default=None)
    a = ap.parse_args()
    with h5py.File(a.weights, "r") as f:
        model = f.attrs["model"]
        model = model.decode() if isinstance(model, bytes) else str(model)
        attrs = {k: (float(f.attrs[k]) if k == "theta" else int(f.attrs[k])) for k in
                 ("L", "D", "H", "Hkv", "F", "V", "S_max", "E", "K", "theta") if k in f.attrs}
        params = {n: torch.tensor(f["params"][n][()]) for n in f["params"]}
    names = gpt2_names if model == "gpt2" else llama_names
    prefix = not a.no_prefix
    tensors = []
    for name, t in params.items():
        hf, transposed = names(name, prefix)
        tensors.append((hf, (t.t() if transposed else t).to(DTYPES[a.dtype])))
    if a.buffers and model == "gpt2":
        S = attrs["S_max"]
        for i in range(attrs["L"]):
            mask = torch.tril(torch.ones(S, S)).view(1, 1, S, S).to(DTYPES[a.dtype])
            tensors.append((f"{'transformer.' if prefix else ''}h.{i}.attn.bias", mask))
    if a.buffers and model != "gpt2":
        hd = attrs["D"] // attrs["H"]
        for i in range(attrs["L"]):
            inv = 1.0 / (attrs.get("theta", 10000.0) ** (torch.arange(0, hd, 2).float() / hd))
            tensors.append((f"model.layers.{i}.self_attn.rotary_emb.inv_freq", inv.to(DTYPES[a.dtype])))
    if a.tied_head or a.broken == "head-differs":
        wte = dict(tensors)[("transformer." if prefix else "") + "wte.weight"]
        tensors.append(("lm_head.weight", wte.clone() + (1 if a.broken == "head-differs" else 0)))
    if a.broken == "missing":
        tensors = tensors[1:]
    if a.broken == "extra":
        tensors.append(("model.something_else.weight" if model != "gpt2" else "transformer.h.0.extra", torch.zeros(3)))
    if a.broken == "nan":
        name, t = tensors[-1]
        t = t.clone()
        t.view(-1)[t.numel() // 2] = float("nan")
        tensors[-1] = (name, t)
    config = config_of(model, attrs)
    if a.broken == "eps":
        # gpt2's epsilon is fixed; llama's is the model's own, refused only outside (0, 0.1)
        config["rms_norm_eps" if model != "gpt2" else "layer_norm_epsilon"] = 0.5 if model != "gpt2" else 1e-6
    if a.broken == "bias":
        config["attention_bias" if model != "gpt2" else "add_cross_attention"] = True
    if a.broken == "tied":
        config["tie_word_embeddings"] = model != "gpt2"
    if a.broken == "model-type":
        config["model_type"] = "falcon"
    if a.broken == "architecture":
        config["architectures"] = ["GPT2Model" if model == "gpt2" else "LlamaModel"]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    file_breaks = {"header-length", "overlap", "byte-count", "dtype", "duplicate", "hole"}
    broken = a.broken if a.broken in file_breaks else None
    if a.shards == 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, broken)
        return 0
    per = (len(tensors) + a.shards - 1) // a.shards
    weight_map = {}
    for k in range(a.shards):
        part = tensors[k * per:(k + 1) * per]
        name = f"model-{k + 1:05d}-of-{a.shards:05d}.safetensors"
        write_safetensors(os.path.join(a.out, name), part, broken if k == 0 else None)
        weight_map.update({n: name for n, _ in part})
    if a.broken == "index-missing":
        weight_map[next(iter(weight_map))] = "model-99999-of-99999.safetensors"
    if a.broken == "index-wrong":
        first, last = next(iter(weight_map)), list(weight_map)[-1]
        weight_map[first] = weight_map[last]
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
