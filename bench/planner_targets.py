#!/usr/bin/env python3
"""The planner's targets, side by side in one run (not a test: timings vary).

For gpt2 and llama `small`: runs every fixed strategy (every:K for each K,
sqrt, per-layer, selective, selective:attn-core) and budget:P% for P in 20, 35, 50, 75 in one `remat matrix`;
then, per budget, compares the plan's measured step time with the fastest
fixed strategy whose measured activation peak fits the same budget, and its
predicted step time and peak (`remat plan --json`) with the measured ones.

    /usr/bin/python3 bench/planner_targets.py [--remat build/remat] [--steps 3] [--busy N]

--busy N runs N busy processes beside it the whole time (a neighbour on the
machine): the planner's costs are the fastest of its timed passes, so its
plans should stay within noise of the quiet machine's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

SHARES = [20, 35, 50, 75]


def fixed_strategies(layers):
    specs = ["full", "per-layer", "sqrt", "selective", "selective:attn-core"]
    specs += [f"every:{k}" for k in range(2, layers + 1)]
    # (selective+every:K is refused: every:K keeps its tail, so selective would decide nothing.)
    return specs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--remat", default="build/remat")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--busy", type=int, default=0, help="busy processes to run beside it (a neighbour)")
    args = ap.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        return compare(args)
    finally:
        for h in hogs:
            h.kill()


def compare(args):
    ok = True
    for model in args.models.split(","):
        layers = 12
        budgets = [f"budget:{p}%" for p in SHARES]
        specs = fixed_strategies(layers) + budgets
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.h5")
            cmd = [args.remat, "matrix", "--models", model, "--preset", "small", "--strategies", ",".join(specs),
                   "--steps", str(args.steps), "--out", out]
            print("$", " ".join(cmd), file=sys.stderr)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            runs = {}
            with h5py.File(out, "r") as f:
                for g in f["runs"].values():
                    s = g.attrs["strategy"]
                    s = s.decode() if isinstance(s, bytes) else s
                    runs[s] = (int(g.attrs["activation_peak_bytes"]), float(np.median(g["step_times"][()])),
                               int(g.attrs["predicted_activation_bytes"]))
        full_peak = runs["full"][0]
        print(f"\n{model} small: full {full_peak / 2**20:.1f} MiB, {runs['full'][1]:.3f} s")
        print(f"{'budget':>12} {'MB':>8} {'plan MB':>8} {'plan s':>7} {'pred s':>7} {'best fixed (fits)':>22} {'fixed s':>8} "
              f"{'plan/fixed':>10} {'pred/meas t':>11} {'pred/meas MB':>12}")
        for p, spec in zip(SHARES, budgets):
            budget = int(p / 100 * full_peak)
            peak, seconds, predicted = runs[spec]
            plan = json.loads(subprocess.run([args.remat, "plan", "--model", model, "--preset", "small", "--budget",
                                              f"{p}%", "--json"], check=True, capture_output=True, text=True).stdout)
            fits = [(t, s) for s, (a, t, _) in runs.items() if not s.startswith("budget:") and a <= budget]
            best_t, best_s = min(fits) if fits else (float("nan"), "none fits")
            ratio = seconds / best_t
            print(f"{spec:>12} {budget / 2**20:8.1f} {peak / 2**20:8.1f} {seconds:7.3f} {plan['predicted_step_s']:7.3f} "
                  f"{best_s:>22} {best_t:8.3f} {ratio:10.3f} {plan['predicted_step_s'] / seconds:11.3f} "
                  f"{predicted / peak:12.3f}")
            ok = ok and peak <= budget
        per_layer = runs["per-layer"][0]
        below = int(0.6 * per_layer)
        smallest = json.loads(subprocess.run([args.remat, "plan", "--model", model, "--preset", "small", "--budget",
                                              "min", "--json"], check=True, capture_output=True, text=True).stdout)
        print(f"60% of per-layer ({per_layer / 2**20:.1f} MiB) = {below / 2**20:.1f} MiB; smallest feasible budget "
              f"{smallest['smallest_budget_bytes'] / 2**20:.1f} MiB "
              f"({smallest['smallest_budget_bytes'] / per_layer:.0%} of per-layer)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
