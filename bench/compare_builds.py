#!/usr/bin/env python3
"""Two builds of remat side by side in one run: before and after a change.

    bench/compare_builds.py OLD/remat NEW/remat [--models gpt2,llama] \
        [--strategies full,per-layer] [--preset small] [--rounds 3]

Each (model, strategy) runs `remat time --json` in a fresh process, the two
builds alternating and the order swapping every round, so drift of this
machine's speed falls on both alike. Prints each pair's median step times,
their ratio (new / old: below 1 is faster), and whether the loss and the
activation peak agree exactly (a refactoring must change neither).
"""
import argparse
import json
import statistics
import subprocess
import sys


def time_once(remat, model, strategy, preset, steps):
    cmd = [remat, "time", "--model", model, "--strategy", strategy, "--preset", preset,
           "--steps", str(steps), "--warmup", "1", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", help="the remat binary before the change")
    p.add_argument("new", help="the remat binary after the change")
    p.add_argument("--models", default="gpt2,llama,bert,revformer")
    p.add_argument("--strategies", default="full,per-layer,selective")
    p.add_argument("--preset", default="small")
    p.add_argument("--rounds", type=int, default=3, help="alternating runs of each build per pair")
    p.add_argument("--steps", type=int, default=5, help="timed steps per run (each run reports their median)")
    a = p.parse_args()

    print(f"| model | strategy | old s/step | new s/step | new/old | loss | activation peak |")
    print(f"|---|---|---|---|---|---|---|")
    ratios = []
    for model in a.models.split(","):
        for strategy in a.strategies.split(","):
            runs = {"old": [], "new": []}
            for r in range(a.rounds):
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                for which in order:
                    runs[which].append(time_once(getattr(a, which), model, strategy, a.preset, a.steps))
            old_s = statistics.median(x["median_s"] for x in runs["old"])
            new_s = statistics.median(x["median_s"] for x in runs["new"])
            same_loss = runs["old"][0]["loss"] == runs["new"][0]["loss"]
            same_peak = runs["old"][0]["activation_peak_bytes"] == runs["new"][0]["activation_peak_bytes"]
            ratios.append(new_s / old_s)
            print(f"| {model} | {strategy} | {old_s:.4f} | {new_s:.4f} | {new_s / old_s:.3f} | "
                  f"{'same' if same_loss else 'DIFFERS'} | {'same' if same_peak else 'DIFFERS'} |", flush=True)
    print(f"\ngeometric mean of new/old over {len(ratios)} pairs: "
          f"{statistics.geometric_mean(ratios):.3f}")


if __name__ == "__main__":
    main()
