#!/usr/bin/env python3
"""Mutation fuzzer over remat's input files: weight files, golden files,
results files and Hugging Face model folders, mutated the ways a damaged or
hostile file differs from a good one (attributes deleted, mistyped, made
arrays or absurd; datasets reshaped, retyped, replaced by groups, filled with
NaN; files truncated; a safetensors header's bytes, length, JSON or entries
damaged; config.json's keys deleted or retyped). Every case
must end in exit 0 with a finite result, or exit 2 with one line on stderr:
never a signal, a hang, another exit code, or a temporary file left behind.

    fuzz_files.py path/to/remat [--cases N] [--seed S] [--timeout SECONDS]

Without --seed, each run draws its seed (printed; REMAT_SAMPLE_SEED=N
repeats a run), so that runs together cover more mutations than any one.
"""
import argparse
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import warnings

import h5py
import numpy as np


def run(remat, args, cwd, timeout):
    try:
        p = subprocess.run([remat] + args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", "hang"
    return p.returncode, p.stdout, p.stderr


# --- mutations: each takes (file, rng) and changes the open h5py file ------

def objects(f):
    names = []
    f.visit(names.append)
    return ["/"] + ["/" + n for n in names]


def datasets(f):
    return [n for n in objects(f) if isinstance(f[n], h5py.Dataset)]


def small_datasets(f):
    """Datasets this script can read back (not one an earlier mutation made huge)."""
    return [n for n in datasets(f) if f[n].size <= 1 << 22]


def attributed(f):
    return [n for n in objects(f) if len(f[n].attrs) > 0]


def pick_attr(f, rng):
    owners = attributed(f)
    if not owners:
        return None, None
    o = rng.choice(owners)
    return f[o], rng.choice(sorted(f[o].attrs.keys()))


def attr_delete(f, rng):
    o, a = pick_attr(f, rng)
    if o is not None:
        del o.attrs[a]


def attr_array(f, rng):
    o, a = pick_attr(f, rng)
    if o is None:
        return
    v = o.attrs[a]
    n = rng.choice([0, 2, 64, 1000])
    if isinstance(v, (bytes, str)):
        o.attrs[a] = np.array([b"x" * 8] * n)
    else:
        o.attrs[a] = np.full(n, 2, dtype=np.int64)


def attr_retype(f, rng):
    o, a = pick_attr(f, rng)
    if o is None:
        return
    o.attrs[a] = rng.choice([b"text", 1.5, -7, np.float32(np.nan), np.uint64(2**64 - 1), np.int8(3), b""])


def attr_extreme(f, rng):
    o, a = pick_attr(f, rng)
    if o is None:
        return
    o.attrs[a] = rng.choice([0, -1, 2**31, 2**40, 10**9, 99, np.nan, np.inf, -np.inf, 1e300])


def attr_long_string(f, rng):
    o, a = pick_attr(f, rng)
    if o is not None:
        o.attrs[a] = "y" * rng.choice([1000, 100000])


def ds_delete(f, rng):
    d = datasets(f)
    if d:
        del f[rng.choice(d)]


def ds_reshape(f, rng):
    d = datasets(f)
    if not d:
        return
    name = rng.choice(d)
    old = f[name]
    dtype = old.dtype
    shape = rng.choice([(), (0,), (1,), (3, 5), tuple(s + 1 for s in old.shape), old.shape[::-1], (2, 2, 2, 2)])
    del f[name]
    if dtype.kind in "SU":
        f.create_dataset(name, shape=shape, dtype=dtype)
    elif math.prod(shape) > 1 << 20:
        # A shape an earlier mutation made huge: declared, its ones a fill value HDF5 never stores (the
        # fuzzer must not allocate it; remat must refuse reading it).
        f.create_dataset(name, shape=shape, dtype=dtype, fillvalue=1)
    else:
        f.create_dataset(name, data=np.ones(shape, dtype=dtype))


def ds_retype(f, rng):
    d = small_datasets(f)
    if not d:
        return
    name = rng.choice(d)
    data = f[name][()]
    del f[name]
    t = rng.choice(["f8", "i8", "i1", "u4", "f2", "S4"])
    try:
        f.create_dataset(name, data=np.asarray(data).astype(t))
    except (ValueError, TypeError):
        f.create_dataset(name, data=np.zeros(3, dtype=t))


def ds_to_group(f, rng):
    d = datasets(f)
    if d:
        name = rng.choice(d)
        del f[name]
        f.create_group(name)


def ds_nonfinite(f, rng):
    d = [n for n in small_datasets(f) if f[n].dtype.kind == "f" and f[n].size > 0]
    if d:
        ds = f[rng.choice(d)]
        flat = ds[()].reshape(-1)
        flat[rng.randrange(flat.size)] = rng.choice([np.nan, np.inf, -np.inf])
        ds[...] = flat.reshape(ds.shape)


def ds_huge_claim(f, rng):
    d = datasets(f)
    if d:
        name = rng.choice(d)
        dtype = f[name].dtype if f[name].dtype.kind != "S" else "f4"
        del f[name]
        # Chunked with no data written: the file claims far more than it holds.
        f.create_dataset(name, shape=(1 << 20, 1 << 20), dtype=dtype, chunks=(1, 1024))


def ds_out_of_range(f, rng):
    d = [n for n in small_datasets(f) if f[n].dtype.kind == "i" and f[n].size > 0]
    if d:
        ds = f[rng.choice(d)]
        flat = ds[()].reshape(-1)
        flat[rng.randrange(flat.size)] = rng.choice([-1, 64, 256, 2**31 - 1])
        ds[...] = flat.reshape(ds.shape)


def group_to_dataset(f, rng):
    groups = [n for n in objects(f) if n != "/" and isinstance(f[n], h5py.Group)]
    if groups:
        name = rng.choice(groups)
        del f[name]
        f.create_dataset(name, data=np.arange(4, dtype="i4"))


MUTATIONS = [attr_delete, attr_array, attr_retype, attr_extreme, attr_long_string, ds_delete, ds_reshape, ds_retype,
             ds_to_group, ds_nonfinite, ds_huge_claim, ds_out_of_range, group_to_dataset]


# --- a Hugging Face model folder folder: bytes of the safetensors file, its
# header's JSON, or config.json's keys, damaged ------------------------------

def st_mutate(folder, rng):
    path = os.path.join(folder, "model.safetensors")
    data = bytearray(open(path, "rb").read())
    n = int.from_bytes(data[:8], "little")
    kind = rng.choice(["flip", "length", "truncate", "header", "config", "config"])
    if kind == "flip":  # bytes anywhere in the length and the header
        for _ in range(rng.choice([1, 2, 8])):
            data[rng.randrange(0, 8 + n)] = rng.randrange(256)
    elif kind == "length":
        data[:8] = rng.choice([0, 7, n - 1, n + 1, len(data), 2**63 - 1, 2**64 - 1]).to_bytes(8, "little")
    elif kind == "truncate":
        del data[rng.randrange(0, len(data)):]
    elif kind == "header":
        import json
        header = json.loads(bytes(data[8:8 + n]))
        name = rng.choice([k for k in header if k != "__metadata__"])
        field = rng.choice(["dtype", "shape", "data_offsets", "drop", "dup"])
        if field == "dtype":
            header[name]["dtype"] = rng.choice(["F64", "I64", "BOOL", "", 7, None])
        elif field == "shape":
            header[name]["shape"] = rng.choice([[], [-1], [1 << 62, 1 << 62], "x", [1.5], [0]])
        elif field == "data_offsets":
            header[name]["data_offsets"] = rng.choice([[5, 2], [0, 1 << 62], [-1, 4], [0], "x", [0, 0]])
        elif field == "drop":
            del header[name]
        else:
            header[name + "x"] = header[name]
        text = json.dumps(header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        data = bytearray(len(text).to_bytes(8, "little")) + text + data[8 + n:]
    else:
        import json
        cpath = os.path.join(folder, "config.json")
        config = json.load(open(cpath))
        key = rng.choice(sorted(config))
        if rng.random() < 0.3:
            del config[key]
        else:
            config[key] = rng.choice([None, -1, 0, 2**40, 1.5e300, "x", [1, 2], {"a": 1}, True])
        json.dump(config, open(cpath, "w"))
        return "config:" + key
    open(path, "wb").write(bytes(data))
    return "safetensors:" + kind


def mutate(src, dst, rng):
    if os.path.isdir(src):
        shutil.copytree(src, dst)
        return st_mutate(dst, rng)
    shutil.copy(src, dst)
    if rng.random() < 0.1:  # truncation
        size = os.path.getsize(dst)
        with open(dst, "r+b") as fh:
            fh.truncate(rng.randrange(0, size))
        return "truncate"
    names = []
    with h5py.File(dst, "r+") as f:
        for _ in range(rng.choice([1, 1, 2, 3])):
            m = rng.choice(MUTATIONS)
            m(f, rng)
            names.append(m.__name__)
    return "+".join(names)


def judge(case, rc, out, err, work, finite_marker):
    """None if the outcome is acceptable, else why not."""
    leftovers = [n for n in os.listdir(work) if ".partial" in n or n.endswith(".lock")]
    if leftovers:
        return f"left {leftovers}"
    if rc is None:
        return "hang (timeout)"
    if rc < 0 or rc >= 128:
        return f"killed by a signal (exit {rc})"
    lines = [l for l in err.splitlines() if l.strip()]
    if rc == 2:
        if len(lines) != 1 or not lines[0].startswith("remat: error: "):
            return f"exit 2 but stderr is not one error line: {err!r}"
        return None
    if rc == 0:
        if finite_marker not in out:
            return f"exit 0 without its result ('{finite_marker}') on stdout"
        for tok in out.replace("|", " ").split():
            if tok.lower() in ("nan", "-nan", "inf", "-inf"):
                return f"exit 0 with a non-finite value in the output"
        return None
    if rc == 1 and finite_marker == "vs golden":  # a drifted golden file is a check failure, not an error
        return None
    return f"exit {rc}: {err.strip()[:300]}"


def main():
    warnings.filterwarnings("ignore")  # the mutations overflow casts on purpose
    np.seterr(all="ignore")
    ap = argparse.ArgumentParser()
    ap.add_argument("remat")
    ap.add_argument("--cases", type=int, default=384)
    ap.add_argument("--seed", type=int, default=None, help="default: REMAT_SAMPLE_SEED, else drawn per run")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    if a.seed is None:
        a.seed = int(os.environ.get("REMAT_SAMPLE_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"fuzz: sample seed {a.seed} (REMAT_SAMPLE_SEED={a.seed} repeats this run)", flush=True)
    remat = os.path.abspath(a.remat)
    work = tempfile.mkdtemp(prefix="remat-fuzz-")
    base = tempfile.mkdtemp(prefix="remat-fuzz-base-")
    try:
        def make(args):
            rc, _, err = run(remat, args, base, a.timeout)
            if rc != 0:
                sys.exit(f"fuzz: could not make the corpus: remat {' '.join(args)}: {err}")
        make(["export", "--model", "llama", "--preset", "tiny", "--out", "weights.h5"])
        make(["check", "--model", "gpt2", "--preset", "tiny", "--strategies", "full", "--save-golden", "golden.h5"])
        make(["matrix", "--preset", "tiny", "--layers", "2", "--strategies", "full,per-layer", "--steps", "1",
              "--out", "results.h5"])
        make(["export", "--model", "gpt2", "--preset", "tiny", "--out", "gpt2.h5"])
        make(["export-hf", "--weights", "gpt2.h5", "--out", "hf"])
        # What each kind of file is fed to, and the output marker of a result.
        targets = [
            ("weights.h5", lambda p: ["grads", "--weights", p, "--out", "out.h5"], "loss"),
            ("weights.h5", lambda p: ["check", "--weights", p, "--strategies", "full,per-layer"], "strategy"),
            ("golden.h5", lambda p: ["check", "--golden", p, "--strategies", "full"], "vs golden"),
            ("results.h5", lambda p: ["report", p], "remat results"),
            ("hf", lambda p: ["grads", "--weights", p, "--out", "out.h5"], "loss"),
            ("results.h5", lambda p: ["matrix", "--preset", "tiny", "--layers", "2", "--strategies", "full,every:2",
                                      "--steps", "1", "--resume", "--out", p], "wrote"),
        ]
        rng = random.Random(a.seed)
        failures = []
        kinds = {}
        for case in range(a.cases):
            src, command, marker = targets[case % len(targets)]
            for n in os.listdir(work):
                p = os.path.join(work, n)
                shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
            target = os.path.join(work, src)
            what = mutate(os.path.join(base, src), target, rng)
            rc, out, err = run(remat, command(src), work, a.timeout)
            why = judge(case, rc, out, err, work, marker)
            kinds[rc] = kinds.get(rc, 0) + 1
            if why:
                failures.append(f"case {case} ({src}, {what}, remat {' '.join(command(src))}): {why}")
        print(f"fuzz: {a.cases} cases, seed {a.seed}; exit codes {dict(sorted(kinds.items(), key=str))}")
        for f in failures:
            print("FAIL:", f)
        if failures:
            print(f"fuzz: {len(failures)} case(s) failed")
            sys.exit(1)
        print("fuzz: every case ended in a finite result or one clear error")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
