#!/usr/bin/python3
"""remat beside PyTorch: the same models and strategies, timed one after the other.

    /usr/bin/python3 bench/side_by_side.py [--remat build/remat] [--preset small] [--threads 2]
                          [--models gpt2,llama,bert,revformer] [--strategies ...]
                          [--steps 5] [--precision fp32|bf16] [--out FILE.md]

Each (implementation, model, strategy) runs in a fresh process: the model (its
weights and zeroed gradient buffers) and a random batch are made, the resident
set is read, then one warm-up step and --steps timed steps run. Reported: the
median step time and the peak resident set above that baseline (Linux VmHWM,
reset before the steps), and for remat also the tracker's exact activation
bytes. PyTorch's memory comes from a second, one-step run in which glibc maps
and unmaps every block above 64 kB, so that its resident set follows its
live tensors rather than its allocator's retained arenas. The order alternates between pairs (PyTorch first, then remat first),
since timings on a shared machine drift.

The PyTorch side is written here in idiomatic PyTorch (float32, F.layer_norm,
F.gelu, torch.utils.checkpoint without reentrancy), from docs/models.md; it shares
no code with remat. Strategies: full; per-layer (every block checkpointed);
sqrt (segments of ceil(sqrt L) blocks); selective and selective:attn-core
(both the attention core, softmax(q k^T) v, checkpointed: remat's bare
`selective` also recomputes norms and the MLP activation, which PyTorch 1.13's
checkpoint cannot do without recomputing the GEMMs that consume them);
offload-checkpoint (per-layer, block inputs through save_on_cpu, which on a
CPU-only machine keeps a CPU tensor as it is, as remat's host backend does);
reversible (revformer: a RevNet autograd function that rebuilds block inputs
in backward). --precision bf16 runs remat at `--precision bf16` and wraps
PyTorch's forward and loss in torch.autocast("cpu", dtype=torch.bfloat16), as a
PyTorch user's bf16 training does (docs/precision.md).

Debian's PyTorch multiplies float32 through the system's BLAS, OpenBLAS, as
remat does. On a CPU OpenBLAS does not know, it falls back to its generic
Prescott kernels (a fifth of the AVX-512 kernels' rate on an Intel Xeon of
model 207); remat starts itself again with the kernels the CPU has
(docs/design.md), so the PyTorch workers run with OPENBLAS_CORETYPE set to
the same kernels (unless it is set already): both sides multiply with the
same BLAS kernels, and the table's first line names them.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

STRATEGIES = ["full", "per-layer", "sqrt", "selective", "selective:attn-core", "offload-checkpoint"]


# ----------------------------------------------------------------------------
# The PyTorch worker (imported lazily: the driver needs no torch).

def torch_worker(model_name, strategy, z, steps, threads, precision="fp32", device="cpu"):
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if device == "cuda":
        torch.set_default_device("cuda")  # (PyTorch 2; Debian's CPU 1.13 lacks it and needs it not)
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 products, as remat's cuBLAS calls
    L, D, H, Hkv, FF, S, V, B = (z[k] for k in ("L", "D", "H", "Hkv", "F", "S", "V", "B"))
    hd = D // H
    params = []

    def param(*shape, std=0.02, value=None):
        t = torch.full(shape, value) if value is not None else torch.randn(*shape) * std
        t.requires_grad_(True)
        params.append(t)
        return t

    def ones(n):
        return param(n, value=1.0)

    def zeros(n):
        return param(n, value=0.0)

    def core(q, k, v, causal):
        if device == "cuda":  # what a PyTorch user runs on a GPU: fused (memory-efficient) attention
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        att = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
            att = att.masked_fill(mask, float("-inf"))
        return torch.softmax(att, dim=-1) @ v

    def attention_core(q, k, v, causal):
        if strategy.startswith("selective"):
            return checkpoint(core, q, k, v, causal, use_reentrant=False)
        return core(q, k, v, causal)

    def heads(t, n):
        return t.view(t.shape[0], t.shape[1], n, hd).transpose(1, 2)

    def merge(t):
        return t.transpose(1, 2).reshape(t.shape[0], t.shape[2], -1)

    def gpt_attention(x, w):
        q, k, v = F.linear(x, w["qkv"], w["qkv_b"]).split(D, dim=-1)
        return F.linear(merge(attention_core(heads(q, H), heads(k, H), heads(v, H), True)), w["proj"], w["proj_b"])

    def gpt_mlp(x, w):
        return F.linear(F.gelu(F.linear(x, w["fc"], w["fc_b"]), approximate="tanh"), w["fc2"], w["fc2_b"])

    def gpt_weights():
        return {"ln1_w": ones(D), "ln1_b": zeros(D), "qkv": param(3 * D, D), "qkv_b": zeros(3 * D),
                "proj": param(D, D), "proj_b": zeros(D), "ln2_w": ones(D), "ln2_b": zeros(D),
                "fc": param(4 * D, D), "fc_b": zeros(4 * D), "fc2": param(D, 4 * D), "fc2_b": zeros(D)}

    if model_name in ("gpt2", "revformer"):
        wte, wpe, lnf_w, lnf_b = param(V, D), param(S, D), ones(D), zeros(D)
        blocks = [gpt_weights() for _ in range(L)]

        def embed(tokens):
            return wte[tokens] + wpe[:S]

        def head(x):
            return F.layer_norm(x, (D,), lnf_w, lnf_b, 1e-5) @ wte.T

    if model_name == "gpt2":
        def block(x, w):
            x = x + gpt_attention(F.layer_norm(x, (D,), w["ln1_w"], w["ln1_b"], 1e-5), w)
            return x + gpt_mlp(F.layer_norm(x, (D,), w["ln2_w"], w["ln2_b"], 1e-5), w)
    elif model_name == "llama":
        tok, norm, out = param(V, D), ones(D), param(V, D)
        blocks = [{"n1": ones(D), "wq": param(D, D), "wk": param(Hkv * hd, D), "wv": param(Hkv * hd, D),
                   "wo": param(D, D), "n2": ones(D), "w1": param(FF, D), "w2": param(D, FF), "w3": param(FF, D)}
                  for _ in range(L)]
        j = torch.arange(hd // 2, dtype=torch.float32)
        angle = torch.arange(S, dtype=torch.float32)[:, None] * 10000.0 ** (-2 * j / hd)
        cos, sin = torch.cos(angle), torch.sin(angle)

        def rms(x, w):
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w

        def rotary(t):  # [B, n, S, hd]
            a, b = t[..., : hd // 2], t[..., hd // 2:]
            return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

        def block(x, w):
            a = rms(x, w["n1"])
            q, k = rotary(heads(F.linear(a, w["wq"]), H)), rotary(heads(F.linear(a, w["wk"]), Hkv))
            v = heads(F.linear(a, w["wv"]), Hkv)
            k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
            x = x + F.linear(merge(attention_core(q, k, v, True)), w["wo"])
            m = rms(x, w["n2"])
            return x + F.linear(F.silu(F.linear(m, w["w1"])) * F.linear(m, w["w3"]), w["w2"])

        def embed(tokens):
            return tok[tokens]

        def head(x):
            return F.linear(rms(x, norm), out)
    elif model_name == "bert":
        wemb, pemb, eln_w, eln_b, cls, cls_b = param(V, D), param(S, D), ones(D), zeros(D), param(V, D), zeros(V)
        blocks = [{"q": param(D, D), "q_b": zeros(D), "k": param(D, D), "k_b": zeros(D), "v": param(D, D),
                   "v_b": zeros(D), "o": param(D, D), "o_b": zeros(D), "ln1_w": ones(D), "ln1_b": zeros(D),
                   "fc": param(4 * D, D), "fc_b": zeros(4 * D), "fc2": param(D, 4 * D), "fc2_b": zeros(D),
                   "ln2_w": ones(D), "ln2_b": zeros(D)} for _ in range(L)]

        def block(x, w):
            q, k, v = (heads(F.linear(x, w[n], w[n + "_b"]), H) for n in ("q", "k", "v"))
            h = F.layer_norm(x + F.linear(merge(attention_core(q, k, v, False)), w["o"], w["o_b"]), (D,),
                             w["ln1_w"], w["ln1_b"], 1e-12)
            m = F.linear(F.gelu(F.linear(h, w["fc"], w["fc_b"])), w["fc2"], w["fc2_b"])
            return F.layer_norm(h + m, (D,), w["ln2_w"], w["ln2_b"], 1e-12)

        def embed(tokens):
            return F.layer_norm(wemb[tokens] + pemb[:S], (D,), eln_w, eln_b, 1e-12)

        def head(x):
            return F.linear(x, cls, cls_b)

    if model_name == "revformer":
        def f_fn(t, w):
            return gpt_attention(F.layer_norm(t, (D,), w["ln1_w"], w["ln1_b"], 1e-5), w)

        def g_fn(t, w):
            return gpt_mlp(F.layer_norm(t, (D,), w["ln2_w"], w["ln2_b"], 1e-5), w)

        def undo_half(fn, w, inp, out, grad_out, grad_in_other):
            """out = other + fn(inp): returns other, and grad_in_other plus fn's
            gradient into inp; fn runs once, its graph freed on return."""
            with torch.enable_grad():
                a = inp.detach().requires_grad_(True)
                z = fn(a, w)
                torch.autograd.backward(z, grad_out)
            with torch.no_grad():
                return out - z, grad_in_other + a.grad

        class RevBlock(torch.autograd.Function):
            """y1 = x1 + F(x2), y2 = x2 + G(y1); backward rebuilds x from y."""

            @staticmethod
            def forward(ctx, x1, x2, w_index, *weights):
                w = blocks[w_index]
                with torch.no_grad():
                    y1 = x1 + f_fn(x2, w)
                    y2 = x2 + g_fn(y1, w)
                ctx.w_index = w_index
                ctx.outputs = None  # filled by the next block's backward (or the head)
                return y1, y2

            @staticmethod
            def backward(ctx, dy1, dy2):
                w = blocks[ctx.w_index]
                y1, y2 = ctx.outputs
                x2, dy1 = undo_half(g_fn, w, y1, y2, dy2, dy1)  # y2 = x2 + G(y1)
                x1, dx2 = undo_half(f_fn, w, x2, y1, dy1, dy2)  # y1 = x1 + F(x2)
                if ctx.previous is not None:
                    ctx.previous.outputs = (x1, x2)
                return (dy1, dx2, None) + (None,) * len(w)

        def forward(tokens):
            x = embed(tokens)
            if strategy != "reversible":
                x1 = x2 = x
                for w in blocks:
                    x1 = x1 + f_fn(x2, w)
                    x2 = x2 + g_fn(x1, w)
                return head((x1 + x2) / 2)
            x1 = x2 = x
            previous = None
            for i, w in enumerate(blocks):
                y1, y2 = RevBlock.apply(x1, x2, i, *w.values())
                ctx = y1.grad_fn
                ctx.previous = previous
                previous = ctx
                x1, x2 = y1, y2
            previous.outputs = (x1.detach(), x2.detach())
            return head((x1 + x2) / 2)
    else:
        def run_blocks(x):
            if strategy in ("per-layer", "offload-checkpoint"):
                for w in blocks:
                    x = checkpoint(block, x, w, use_reentrant=False)
                return x
            if strategy == "sqrt":
                k = math.ceil(math.sqrt(L))

                def segment(t, ws):
                    for w in ws:
                        t = block(t, w)
                    return t
                for s in range(0, L, k):
                    x = checkpoint(segment, x, blocks[s:s + k], use_reentrant=False)
                return x
            for w in blocks:
                x = block(x, w)
            return x

        def forward(tokens):
            if strategy == "offload-checkpoint":
                with torch.autograd.graph.save_on_cpu():
                    return head(run_blocks(embed(tokens)))
            return head(run_blocks(embed(tokens)))

    tokens = torch.randint(0, V, (B, S))
    targets = torch.randint(0, V, (B, S))
    for p in params:
        p.grad = torch.zeros_like(p)  # gradient buffers exist before the baseline, as in remat

    def step():
        for p in params:
            p.grad.zero_()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = forward(tokens)
            loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        loss.backward()
        return loss.item()

    return measure(step, steps) if device == "cpu" else measure_cuda(torch, step, steps)


def status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return -1


def measure(step, steps):
    baseline = status_bytes("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    step()  # warm-up
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "peak_above_baseline_bytes": status_bytes("VmHWM") - baseline}


def measure_cuda(torch, step, steps):
    """On a GPU: the caching allocator's peak of allocated bytes above what
    was allocated before the steps (live tensors, as remat's tracker counts)."""
    baseline = torch.cuda.memory_allocated()
    step()  # warm-up
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()  # (loss.item() waits for the GPU)
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times),
            "peak_above_baseline_bytes": torch.cuda.max_memory_allocated() - baseline}


# ----------------------------------------------------------------------------
# The driver.

def preset_sizes(remat, preset):
    out = subprocess.run([remat, "models"], check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("presets (L D H Hkv F S V B"))
    for line in lines[start + 1:]:
        f = line.split()
        if f and f[0] == preset:
            return dict(zip(("L", "D", "H", "Hkv", "F", "S", "V", "B"), map(int, f[1:9])))
    sys.exit(f"side_by_side: remat has no preset '{preset}'")


def blas_kernels(remat):
    """The OpenBLAS kernels remat runs, from its --version line ('..., SkylakeX kernels')."""
    out = subprocess.run([remat, "--version"], check=True, capture_output=True, text=True).stdout
    found = re.search(r"OpenBLAS [^,]*, (\w+) kernels", out)
    return found.group(1) if found else None


def run(cmd, env):
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"side_by_side: {' '.join(cmd)} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def run_torch(model, strategy, preset, steps, threads, precision, device):
    """Times with the default allocator; measures memory in a second run whose
    glibc maps every block above 64 kB and unmaps it on free, so that the
    resident set follows the live tensors. With the default, glibc's adaptive
    threshold leaves freed blocks in per-thread arenas and the peak measures
    the allocator (gpt2 small per-layer: 687 MiB against about 100 live).
    The mapped run is slower (page faults), so it is not the one timed."""
    cmd = [sys.executable, __file__, "--worker", model, strategy, preset, str(steps), str(threads),
           os.environ["REMAT_SIZES"], precision, device]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    timed = run(cmd, env)
    if device == "cuda":
        return timed  # (the allocator's own count: no second run)
    cmd[6] = "1"
    mapped = run(cmd, dict(env, MALLOC_MMAP_THRESHOLD_="65536"))
    timed["peak_above_baseline_bytes"] = mapped["peak_above_baseline_bytes"]
    return timed


def run_remat(remat, model, strategy, preset, steps, threads, precision):
    cmd = [remat, "time", "--model", model, "--strategy", strategy, "--preset", preset, "--steps", str(steps),
           "--precision", precision, "--json", f"--kokkos-num-threads={threads}"]
    return run(cmd, dict(os.environ, OMP_NUM_THREADS=str(threads)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--remat", default=os.path.join(os.path.dirname(__file__), "..", "build", "remat"))
    ap.add_argument("--preset", default="small")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--models", default="gpt2,llama,bert,revformer")
    ap.add_argument("--strategies", default=",".join(STRATEGIES),
                    help="for revformer, 'full' and 'reversible' are run whatever is asked")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: remat --precision bf16 beside PyTorch under autocast(bf16)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: PyTorch on the GPU (scaled_dot_product_attention, no TF32) beside a CUDA build of "
                         "remat; memory is then PyTorch's allocated peak against remat's tracker")
    ap.add_argument("--out", help="also write the table to this Markdown file")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401  (the workers need it; say so before starting)
    except ImportError:
        sys.exit(f"side_by_side: {sys.executable} has no torch: run it with Debian's /usr/bin/python3 "
                 "(scripts/setup.sh installs python3-torch)")
    z = preset_sizes(a.remat, a.preset)
    os.environ["REMAT_SIZES"] = json.dumps(z)
    kernels = os.environ.get("OPENBLAS_CORETYPE") or blas_kernels(a.remat)
    if kernels:
        os.environ["OPENBLAS_CORETYPE"] = kernels  # the PyTorch workers' BLAS runs remat's kernels
    pairs = []
    for m in a.models.split(","):
        for s in (["full", "reversible"] if m == "revformer" else a.strategies.split(",")):
            pairs.append((m, s))
    memory = "RSS" if a.device == "cpu" else "GPU"  # GPU: remat's tracker, PyTorch's allocated peak
    rows = [f"| model | strategy | remat s | PyTorch s | time ratio | remat {memory} MiB | remat tracker MiB "
            f"| PyTorch {memory} MiB | memory ratio ({memory}) |", "|---|---|---|---|---|---|---|---|---|"]
    print(f"{a.preset} preset {z}, {a.device}, {a.threads} threads, {a.precision}, median of {a.steps} steps "
          f"after one warm-up, OpenBLAS {kernels or 'as it chooses'} kernels on both sides", flush=True)
    for i, (m, s) in enumerate(pairs):
        if i % 2 == 0:
            t = run_torch(m, s, a.preset, a.steps, a.threads, a.precision, a.device)
            r = run_remat(a.remat, m, s, a.preset, a.steps, a.threads, a.precision)
        else:
            r = run_remat(a.remat, m, s, a.preset, a.steps, a.threads, a.precision)
            t = run_torch(m, s, a.preset, a.steps, a.threads, a.precision, a.device)
        mib = 1 << 20
        # On a GPU the host's resident set says nothing: the tracker's bytes against the allocator's.
        rr = (r["rss_peak_above_baseline_bytes"] if a.device == "cpu" else r["activation_peak_bytes"]) / mib
        tr = t["peak_above_baseline_bytes"] / mib
        row = (f"| {m} | {s} | {r['median_s']:.3f} | {t['median_s']:.3f} | {r['median_s'] / t['median_s']:.2f} "
               f"| {rr:.1f} | {r['activation_peak_bytes'] / mib:.1f} | {tr:.1f} | {rr / tr if tr > 0 else 0:.2f} |")
        rows.append(row)
        print(row if i else "\n".join(rows), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, model, strategy, preset, steps, threads, sizes, precision, device = sys.argv
        print(json.dumps(torch_worker(model, strategy, json.loads(sizes), int(steps), int(threads), precision,
                                      device)))
    else:
        main()
