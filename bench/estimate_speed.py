#!/usr/bin/env python3
"""How fast `remat estimate` answers at real size (issue targets, measured, not tested).

    /usr/bin/python3 bench/estimate_speed.py [build/remat]

1. llama-70b at S 32768, every fixed strategy: wall time and peak resident
   memory of the process (target: under 5 s and 200 MB).
2. Every published configuration x every fixed strategy x 5 lengths
   (512 .. 8192, --allow-longer beyond a configuration's S_max), one process
   per configuration: total wall time (target: under 60 s).
"""
import json
import os
import resource
import subprocess
import sys
import time

remat = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/remat")


def timed(args):
    start = time.perf_counter()
    done = subprocess.run([remat, *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"remat {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return time.perf_counter() - start, done.stdout


seconds, out = timed(["estimate", "--config", "llama-70b", "--seq", "32768", "--allow-longer", "--json"])
rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"llama-70b, S 32768, {len(json.loads(out))} strategies: {seconds:.2f} s, peak resident {rss_mib:.0f} MiB "
      f"(targets: 5 s, 200 MB)")

names = ["gpt2-124m", "gpt2-355m", "gpt2-774m", "gpt2-1.5b", "llama-7b", "llama-13b", "llama-70b", "llama3-8b",
         "mixtral-8x7b"]  # docs/models.md's published configurations
total, rows = 0.0, 0
for name in names:
    seconds, out = timed(["estimate", "--config", name, "--seq", "512,1024,2048,4096,8192", "--allow-longer", "--json"])
    total += seconds
    rows += len(json.loads(out))
    print(f"  {name}: {seconds:.2f} s")
print(f"{len(names)} configurations x 5 lengths, {rows} (strategy, length) estimates: {total:.1f} s (target: 60 s)")
