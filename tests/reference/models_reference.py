#!/usr/bin/env python3
"""An independent implementation of docs/models.md in PyTorch, for checking remat.

    models_reference.py WEIGHTS.h5 RESULT.h5

Loads the weights and batch from WEIGHTS.h5 (docs/models.md layout), computes the
loss and the gradients in float64 with PyTorch autograd, and compares them with
/loss and /grads/<name> in RESULT.h5 (written by `remat grads`): the loss to
1e-5 relative, each gradient to 1e-4 relative to the tensor's largest
magnitude (at least a millionth of the model's largest gradient). Exit 0 if everything matches, 1 otherwise. Nothing here shares code
with remat.
"""
import math
import sys

import h5py
import torch

torch.set_default_dtype(torch.float64)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def linear(x, p, name, bias=True):
    y = x @ p[name + ".weight"].T
    return y + p[name + ".bias"] if bias else y


def causal_softmax(scores, causal):
    if causal:
        S = scores.shape[-1]
        mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def mha(q, k, v, H, causal):
    B, S, D = q.shape
    hd = D // H
    q, k, v = (t.view(B, S, H, hd).transpose(1, 2) for t in (q, k, v))
    att = causal_softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), causal)
    return (att @ v).transpose(1, 2).reshape(B, S, D)


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2(p, tokens, z, targets):
    S = tokens.shape[1]
    x = p["wte.weight"][tokens] + p["wpe.weight"][:S]
    for i in range(z["L"]):
        h = f"h.{i}."
        a = linear(layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5), p, h + "attn.c_attn")
        q, k, v = a.split(z["D"], dim=-1)
        x = x + linear(mha(q, k, v, z["H"], True), p, h + "attn.c_proj")
        m = layer_norm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5)
        x = x + linear(gelu_tanh(linear(m, p, h + "mlp.c_fc")), p, h + "mlp.c_proj")
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    return x @ p["wte.weight"].T


def rms_norm(x, w, eps=1e-5):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def llama3_frequencies(freq, scaling):
    """Llama 3.1's rope_type llama3, as its paper's code writes it: long wavelengths slowed by factor,
    short ones kept, the band between blended."""
    factor, low, high, original = scaling
    wavelen = 2 * math.pi / freq
    smooth = (original / wavelen - low) / (high - low)
    blended = (1 - smooth) * freq / factor + smooth * freq
    return torch.where(wavelen > original / low, freq / factor,
                       torch.where(wavelen < original / high, freq, blended))


def rotary(x, H, theta=10000.0, scaling=None):
    """Rotate-half: for position p and j < hd/2 the pair (j, j + hd/2) turns by p * theta^(-2j/hd)."""
    B, S, W = x.shape
    hd = W // H
    x = x.view(B, S, H, hd)
    # The table in float64 for the float64 reference, in float32 otherwise
    # (precision_reference.py runs the same code under autocast).
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    j = torch.arange(hd // 2, dtype=dt)
    freq = theta ** (-2 * j / hd)
    if scaling:
        freq = llama3_frequencies(freq, scaling)
    angle = torch.arange(S, dtype=dt)[:, None] * freq  # [S, hd/2]
    cos, sin = torch.cos(angle)[None, :, None, :], torch.sin(angle)[None, :, None, :]
    a, b = x[..., : hd // 2], x[..., hd // 2 :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).view(B, S, W)


def gqa(q, k, v, H, Hkv, causal):
    B, S, _ = q.shape
    hd = q.shape[-1] // H
    q = q.view(B, S, H, hd).transpose(1, 2)
    k = k.view(B, S, Hkv, hd).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    v = v.view(B, S, Hkv, hd).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    att = causal_softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), causal)
    return (att @ v).transpose(1, 2).reshape(B, S, H * hd)


def llama_attention(p, l, x, z):
    a = rms_norm(x, p[l + "attention_norm.weight"], z.get("eps", 1e-5))
    theta = z.get("theta", 10000.0)
    bias = bool(z.get("qkv_bias", 0))  # Qwen2
    scaling = z.get("rope")  # Llama 3.1
    q = rotary(linear(a, p, l + "attention.wq", bias), z["H"], theta, scaling)
    k = rotary(linear(a, p, l + "attention.wk", bias), z["Hkv"], theta, scaling)
    v = linear(a, p, l + "attention.wv", bias)
    return linear(gqa(q, k, v, z["H"], z["Hkv"], True), p, l + "attention.wo", False)


def llama(p, tokens, z, targets):
    x = p["tok_embeddings.weight"][tokens]
    for i in range(z["L"]):
        l = f"layers.{i}."
        x = x + llama_attention(p, l, x, z)
        m = rms_norm(x, p[l + "ffn_norm.weight"], z.get("eps", 1e-5))
        gate = torch.nn.functional.silu(linear(m, p, l + "feed_forward.w1", False))
        x = x + linear(gate * linear(m, p, l + "feed_forward.w3", False), p, l + "feed_forward.w2", False)
    return linear(rms_norm(x, p["norm.weight"], z.get("eps", 1e-5)), p, "output", False)


def bert(p, tokens, z, targets):
    S = tokens.shape[1]
    e = "embeddings."
    x = p[e + "word_embeddings.weight"][tokens] + p[e + "position_embeddings.weight"][:S]
    x = layer_norm(x, p[e + "LayerNorm.weight"], p[e + "LayerNorm.bias"], 1e-12)
    for i in range(z["L"]):
        l = f"encoder.layer.{i}."
        a = l + "attention."
        q, k, v = (linear(x, p, a + "self." + n) for n in ("query", "key", "value"))
        h = x + linear(mha(q, k, v, z["H"], False), p, a + "output.dense")
        h = layer_norm(h, p[a + "output.LayerNorm.weight"], p[a + "output.LayerNorm.bias"], 1e-12)
        m = linear(torch.nn.functional.gelu(linear(h, p, l + "intermediate.dense")), p, l + "output.dense")
        x = layer_norm(h + m, p[l + "output.LayerNorm.weight"], p[l + "output.LayerNorm.bias"], 1e-12)
    return linear(x, p, "cls")


def revformer(p, tokens, z, targets):
    S = tokens.shape[1]
    x = p["wte.weight"][tokens] + p["wpe.weight"][:S]
    x1, x2 = x, x
    for i in range(z["L"]):
        h = f"h.{i}."

        def F(t):
            a = linear(layer_norm(t, p[h + "f.ln.weight"], p[h + "f.ln.bias"], 1e-5), p, h + "f.attn.c_attn")
            q, k, v = a.split(z["D"], dim=-1)
            return linear(mha(q, k, v, z["H"], True), p, h + "f.attn.c_proj")

        def G(t):
            m = layer_norm(t, p[h + "g.ln.weight"], p[h + "g.ln.bias"], 1e-5)
            return linear(gelu_tanh(linear(m, p, h + "g.mlp.c_fc")), p, h + "g.mlp.c_proj")

        x1 = x1 + F(x2)
        x2 = x2 + G(x1)
    x = layer_norm((x1 + x2) / 2, p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    return x @ p["wte.weight"].T


def parallel(p, tokens, z, targets):
    S = tokens.shape[1]
    x = p["wte.weight"][tokens] + p["wpe.weight"][:S]
    for i in range(z["L"]):
        h = f"h.{i}."
        a = layer_norm(x, p[h + "ln.weight"], p[h + "ln.bias"], 1e-5)
        q, k, v = linear(a, p, h + "attn.c_attn").split(z["D"], dim=-1)
        x = x + linear(mha(q, k, v, z["H"], True), p, h + "attn.c_proj") + linear(
            gelu_tanh(linear(a, p, h + "mlp.c_fc")), p, h + "mlp.c_proj")
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    return x @ p["wte.weight"].T


def top_k_first(probs, k):
    """The k largest per row, largest first; among equal values the lower index first."""
    masked = probs.detach().clone()
    rows = torch.arange(probs.shape[0])
    chosen = []
    for _ in range(k):
        best = masked.argmax(dim=-1)  # the first maximal index
        chosen.append(best)
        masked[rows, best] = float("-inf")
    return torch.stack(chosen, dim=1)


def mixtral(p, tokens, z, targets, router_aux=0.01):
    """llama with a top-k mixture of experts; returns logits and router_aux * load-balancing loss."""
    E, K = z["E"], z["K"]
    x = p["tok_embeddings.weight"][tokens]
    B, S, D = x.shape
    counts = torch.zeros(E, dtype=torch.float64)
    prob_sums = torch.zeros(E, dtype=torch.float64)
    for i in range(z["L"]):
        l = f"layers.{i}."
        x = x + llama_attention(p, l, x, z)
        m = rms_norm(x, p[l + "ffn_norm.weight"], z.get("eps", 1e-5)).reshape(B * S, D)
        probs = torch.softmax(m @ p[l + "block_sparse_moe.gate.weight"].T, dim=-1)
        sel = top_k_first(probs, K)
        w = probs.gather(1, sel)
        w = w / w.sum(dim=-1, keepdim=True)
        # Each token's j-th expert on it, weighted, token by token's choice.
        y = torch.zeros_like(m)
        for j in range(K):
            for e in range(E):
                rows = (sel[:, j] == e).nonzero().flatten()
                if rows.numel() == 0:
                    continue
                xe = f"{l}block_sparse_moe.experts.{e}."
                h = torch.nn.functional.silu(m[rows] @ p[xe + "w1.weight"].T) * (m[rows] @ p[xe + "w3.weight"].T)
                y = y.index_add(0, rows, (w[rows, j:j + 1] * (h @ p[xe + "w2.weight"].T)).to(y.dtype))
        x = x + y.reshape(B, S, D)
        counts = counts + torch.nn.functional.one_hot(sel, E).sum(dim=(0, 1)).double()
        prob_sums = prob_sums + probs.sum(dim=0)
    N = z["L"] * B * S
    aux = E * ((counts / N) * (prob_sums / N)).sum()
    logits = linear(rms_norm(x, p["norm.weight"], z.get("eps", 1e-5)), p, "output", False)
    return logits, router_aux * aux


def encdec(p, tokens, z, targets):
    S, D, H = tokens.shape[1], z["D"], z["H"]
    half = z["L"] // 2
    e = p["wte.weight"][tokens] + p["enc.wpe.weight"][:S]
    for i in range(half):
        h = f"enc.h.{i}."
        a = linear(layer_norm(e, p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5), p, h + "attn.c_attn")
        q, k, v = a.split(D, dim=-1)
        e = e + linear(mha(q, k, v, H, False), p, h + "attn.c_proj")
        m = layer_norm(e, p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5)
        e = e + linear(gelu_tanh(linear(m, p, h + "mlp.c_fc")), p, h + "mlp.c_proj")
    e = layer_norm(e, p["enc.ln_f.weight"], p["enc.ln_f.bias"], 1e-5)
    dec_in = torch.cat([torch.zeros_like(targets[:, :1]), targets[:, :-1]], dim=1)
    d = p["wte.weight"][dec_in] + p["dec.wpe.weight"][:S]
    for i in range(half):
        h = f"dec.h.{i}."
        a = linear(layer_norm(d, p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5), p, h + "attn.c_attn")
        q, k, v = a.split(D, dim=-1)
        d = d + linear(mha(q, k, v, H, True), p, h + "attn.c_proj")
        c = layer_norm(d, p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5)
        q = linear(c, p, h + "cross.c_q")
        k, v = linear(e, p, h + "cross.c_kv").split(D, dim=-1)
        d = d + linear(mha(q, k, v, H, False), p, h + "cross.c_proj")
        m = layer_norm(d, p[h + "ln_3.weight"], p[h + "ln_3.bias"], 1e-5)
        d = d + linear(gelu_tanh(linear(m, p, h + "mlp.c_fc")), p, h + "mlp.c_proj")
    d = layer_norm(d, p["dec.ln_f.weight"], p["dec.ln_f.bias"], 1e-5)
    return d @ p["wte.weight"].T


MODELS = {"gpt2": gpt2, "llama": llama, "bert": bert, "revformer": revformer, "parallel": parallel,
          "mixtral": mixtral, "encdec": encdec}


def read_weights(weights_path):
    """The model's name, its sizes, its parameters (arrays, by name) and the batch's tokens and targets."""
    with h5py.File(weights_path, "r") as f:
        z = {k: int(f.attrs[k]) for k in ("L", "D", "H", "S", "V") if k in f.attrs}
        for k in ("Hkv", "F", "E", "K"):
            if k in f.attrs:
                z[k] = int(f.attrs[k])
        for k in ("theta", "eps"):
            if k in f.attrs:
                z[k] = float(f.attrs[k])
        if "qkv_bias" in f.attrs:
            z["qkv_bias"] = int(f.attrs["qkv_bias"])
        if f.attrs.get("rope_factor", 0) > 0:
            z["rope"] = tuple(float(f.attrs[k]) for k in ("rope_factor", "rope_low_freq_factor",
                                                          "rope_high_freq_factor", "rope_original_positions"))
        model = f.attrs["model"]
        model = model.decode() if isinstance(model, bytes) else str(model)
        values = {n: f["params"][n][()] for n in f["params"]}
        tokens = torch.tensor(f["batch/tokens"][()], dtype=torch.long)
        targets = torch.tensor(f["batch/targets"][()], dtype=torch.long)
    return model, z, values, tokens, targets


def main(weights_path, result_path):
    model, z, values, tokens, targets = read_weights(weights_path)
    p = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in values.items()}
    out = MODELS[model](p, tokens, z, targets)
    logits, extra = out if isinstance(out, tuple) else (out, 0.0)  # extra: an auxiliary loss term (mixtral)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)) + extra
    loss.backward()

    failures = []
    with h5py.File(result_path, "r") as r:
        got = float(r["loss"][()])
        rel = abs(got - loss.item()) / abs(loss.item())
        print(f"{model}: loss remat {got:.9g} reference {loss.item():.9g} (rel {rel:.2e})")
        if rel > 1e-5:
            failures.append(f"loss differs by {rel:.2e} relative")
        names = set(r["grads"])
        if names != set(p):
            failures.append(f"gradient names differ: {sorted(names ^ set(p))}")
        worst = (0.0, "")
        # A gradient that is zero in exact arithmetic (BERT's key bias: softmax
        # ignores a constant per row) has no scale of its own: measure it
        # against a millionth of the model's largest gradient instead.
        floor = 1e-6 * max((t.grad.abs().max().item() for t in p.values() if t.grad is not None), default=1.0)
        for n, t in p.items():
            if n not in names:
                continue
            g = torch.tensor(r["grads"][n][()], dtype=torch.float64)
            ref = t.grad if t.grad is not None else torch.zeros_like(t)
            if g.shape != ref.shape:
                failures.append(f"{n}: shape {tuple(g.shape)} vs {tuple(ref.shape)}")
                continue
            scale = max(ref.abs().max().item(), floor)
            err = (g - ref).abs().max().item() / scale
            worst = max(worst, (err, n))
            if err > 1e-4:
                failures.append(f"{n}: gradient error {err:.2e} relative to max |grad| {scale:.3e}")
        print(f"{model}: worst gradient error {worst[0]:.2e} ({worst[1]}) over {len(p)} parameters")
    for f in failures:
        print("MISMATCH", f)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
