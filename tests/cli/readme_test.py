#!/usr/bin/env python3
"""The README's "Using it" commands, run in order in a scratch folder.

    readme_test.py path/to/remat path/to/repository

Every command runs as written (`build/remat` is the built binary) unless it
is slow here (small or deep presets, the PyTorch comparison, mpirun) or
names an example path (path/to/...); a command that reads a file only a
skipped command writes is skipped with it. Each one run must succeed: the
README is followed top to bottom, so a command that reuses a file name for
another kind of file, or needs a step the README leaves out, fails here.
"""
import os
import re
import shutil
import shlex
import subprocess
import sys
import tempfile

remat, repo = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
text = open(os.path.join(repo, "README.md"), encoding="utf-8").read()
block = text.split("## Using it", 1)[1].split("\n## ", 1)[0]

# Indented lines are commands; a trailing backslash continues one; "   # ..." is a comment.
commands, pending = [], ""
for line in block.splitlines():
    if not line.startswith("    "):
        continue
    line = pending + line.strip()
    if line.endswith("\\"):
        pending = line[:-1] + " "
        continue
    pending = ""
    line = re.sub(r"\s+#\s.*$", "", line)
    commands += [c.strip() for c in line.split("&&")]


def slow(words):
    joined = " ".join(words)
    if words[0] in ("mpirun", "/usr/bin/python3") or "path/to" in joined:
        return "mpirun, PyTorch or an example path"
    if re.search(r"--preset (small|deep|long|gpu-medium)", joined):
        return "a preset too big for a quick test"
    sub = words[1] if len(words) > 1 else ""
    if sub in ("matrix", "time", "plan") and "--preset tiny" not in joined:
        return f"{sub} defaults to the small preset"
    return ""


OUTPUTS = ("--out", "--adapters-out", "--svg", "--html")
skipped_files, ran, skipped, failures = set(), 0, 0, []
work = tempfile.mkdtemp()
os.chdir(work)
os.makedirs("build")
os.symlink(remat, "build/remat")
for name in ("tests", "README.md", "bench"):
    os.symlink(os.path.join(repo, name), name)
for command in commands:
    words = shlex.split(command)
    outputs = {words[i + 1] for i, w in enumerate(words[:-1]) if w in OUTPUTS}
    reads_skipped = [w for w in words if w in skipped_files]
    why = slow(words) or (f"reads {reads_skipped[0]}, which a skipped command writes" if reads_skipped else "")
    if why:
        print(f"skip ({why}): {command}")
        skipped_files |= outputs
        skipped += 1
        continue
    done = subprocess.run(words, capture_output=True, text=True, timeout=600)
    ran += 1
    print(f"ran (exit {done.returncode}): {command}")
    if done.returncode != 0:
        failures.append(f"{command}: exit {done.returncode}: {done.stderr.strip()[-400:]}")
    skipped_files -= outputs

os.chdir(repo)
shutil.rmtree(work, ignore_errors=True)
for f in failures:
    print("FAIL:", f)
print(f"README: {ran} commands run, {skipped} skipped, {len(failures)} failed")
if ran < 10:
    print("FAIL: fewer than 10 of the README's commands ran: the test proves little")
    sys.exit(1)
sys.exit(1 if failures else 0)
