#!/usr/bin/env python3
"""The commands of the README and of docs/, run in order, each file in a scratch folder.

    doc_test.py path/to/remat path/to/repository [--mpiexec=PATH] FILE.md...

A reader follows a page top to bottom, so every command on it runs as
written (`build/remat` is the built binary; of the README only "Using it"),
made quick: where a command runs a model at a preset other than `tiny` and
sets no --seq, --batch or --layers, it gets `--seq 32`, `--batch 2` and
(unless it freezes layers or sets a budget) `--layers 4`; `matrix` and `time` get
`--steps 1 --warmup 0` unless they say otherwise; `--steps N` and
`--warmup N` above 10 become 10. Every flag, file name and order of steps is the page's
own, so a command that reuses a file name for another kind of file, or needs
a step the page leaves out, fails here.

What a page says the reader brings is made first: `gpt2` (a Hugging Face
GPT-2 folder: here a two-block one of the small preset's width and byte
vocabulary, with the real one's 1024 positions; also at the README's
`path/to/hf-gpt2-folder` and training.md's `hf-gpt2-folder`) and `notes.txt`
(some text).

`mpirun` is the --mpiexec given (skipped without one) and gets `--oversubscribe` (more ranks than this machine's cores) and,
as root, `--allow-run-as-root`, as the README says. Skipped, with the reason
printed: the PyTorch comparison, the CUDA build and bundle, the GPU preset,
a page's hypothetical names (`my_model`, the strategy `even-attn-core` that
adding-a-strategy.md writes), `...` elisions, and any command that reads a
file only a skipped command writes.
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

remat, repo = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
mpiexec = next((a.split("=", 1)[1] for a in sys.argv[3:] if a.startswith("--mpiexec=")), "")
pages = [a for a in sys.argv[3:] if not a.startswith("--mpiexec=")]
RUNNERS = ("build/remat", "mpirun", "scripts/", "tar ", "build-cuda/", "/usr/bin/python3", "python3")
OUTPUTS = ("--out", "--adapters-out", "--svg", "--html")


def page_commands(path):
    """Indented lines that start with a command; a trailing backslash continues one.

    Each comes with the exit code the page promises: 0 unless its comment
    says "exit N" (a page showing an error)."""
    text = open(path, encoding="utf-8").read()
    if os.path.basename(path) == "README.md":
        text = text.split("## Using it", 1)[1].split("\n## ", 1)[0]
    commands, pending, in_fence = [], "", False
    for line in text.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence  # fenced blocks hold code (C++, Python), not commands
            continue
        if in_fence or not line.startswith("    "):
            pending = ""
            continue
        line = pending + line.strip()
        if line.startswith("$ "):
            line = line[2:]
        if not pending and not line.startswith(RUNNERS):
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        comment = re.search(r"\s+#\s(.*)$", line)
        expected = re.search(r"\bexit (\d+)", comment.group(1)) if comment else None
        line = line[:comment.start()] if comment else line
        commands += [(c.strip(), int(expected.group(1)) if expected else 0) for c in line.split("&&")]
    return commands


def skip_reason(command):
    words = command.split()
    if words[0] == "mpirun" and not mpiexec:
        return "mpirun: this remat was built without MPI"
    if "python3" in words[0]:
        return "the PyTorch comparison (bench/)"
    if words[0].startswith(("scripts/", "build-cuda/", "tar", "remat-gpu/")):
        return "the CUDA build and its bundle"
    if "gpu-medium" in command:
        return "the GPU preset"
    if re.search(r"\bmy_model\b|even-attn-core", command):
        return "the page's hypothetical example"
    if " ... " in command:
        return "an elision (...)"
    return ""


def quick(command):
    """The command as written, at a size that runs in seconds here."""
    words = command.split()
    remat_at = words.index("build/remat") if "build/remat" in words else 0
    sub = words[remat_at + 1] if len(words) > remat_at + 1 else ""
    runs_preset = sub in ("check", "time", "matrix", "plan", "train") and not re.search(
        r"--weights|--golden|--preset tiny|--config", command)
    if runs_preset:
        if "--seq" not in words:
            command += " --seq 32"
        if "--batch" not in words:
            command += " --batch 2"
        # (Not where layers are frozen by number, or a budget's share of full depends on the depth.)
        if "--layers" not in words and not re.search(r"freeze|budget", command):
            command += " --layers 4"
    if sub in ("matrix", "time"):
        if "--steps" not in words:
            command += " --steps 1"
        if "--warmup" not in words:
            command += " --warmup 0"
    if words[0] == "mpirun":  # more ranks than cores here, and CI runs as root (as the README says)
        command = command.replace("mpirun", mpiexec + " --oversubscribe" + (" --allow-run-as-root" if os.geteuid() == 0 else ""), 1)
    return re.sub(r"--(steps|warmup) (\d+)", lambda m: f"--{m.group(1)} {min(int(m.group(2)), 10)}", command)


def bring(work):
    """What the pages say the reader brings: made once, copied into each page's folder."""
    global brought
    if brought is None:
        brought = tempfile.mkdtemp()
        def run(*args):
            subprocess.run([remat, *args], check=True, capture_output=True, cwd=brought)
        run("export", "--model", "gpt2", "--preset", "small", "--layers", "2", "--seq", "1024", "--out", "hf-source.h5")
        run("export-hf", "--weights", "hf-source.h5", "--out", "gpt2")
        os.remove(os.path.join(brought, "hf-source.h5"))
        with open(os.path.join(brought, "notes.txt"), "w") as f:
            f.write("The quick brown fox jumps over the lazy dog.\n" * 400)
    shutil.copytree(os.path.join(brought, "gpt2"), os.path.join(work, "gpt2"))
    shutil.copy(os.path.join(brought, "notes.txt"), work)
    os.makedirs(os.path.join(work, "path/to"))
    os.symlink(os.path.join(work, "gpt2"), os.path.join(work, "path/to/hf-gpt2-folder"))
    os.symlink(os.path.join(work, "gpt2"), os.path.join(work, "hf-gpt2-folder"))


brought = None


def run_page(page):
    ran, skipped, failures, skipped_files = 0, 0, [], set()
    commands = page_commands(page)
    if not commands:
        return ran, skipped, failures
    work = tempfile.mkdtemp()
    try:
        os.makedirs(os.path.join(work, "build"))
        os.symlink(remat, os.path.join(work, "build/remat"))
        for name in ("tests", "README.md", "bench", "docs"):
            os.symlink(os.path.join(repo, name), os.path.join(work, name))
        bring(work)
        for command, expected in commands:
            words = shlex.split(command)
            outputs = {words[i + 1] for i, w in enumerate(words[:-1]) if w in OUTPUTS}
            reads = [w for w in words if w in skipped_files or any(glob.fnmatch.fnmatch(f, w) for f in skipped_files)]
            why = skip_reason(command) or (f"reads {reads[0]}, which a skipped command writes" if reads else "")
            if why:
                print(f"  skip ({why}): {command}")
                skipped_files |= {f for f in outputs if not os.path.exists(os.path.join(work, f))}
                skipped += 1
                continue
            started = time.monotonic()
            done = subprocess.run(quick(command), shell=True, cwd=work, capture_output=True, text=True, timeout=600)
            ran += 1
            print(f"  ran (exit {done.returncode}, {time.monotonic() - started:.1f} s): {quick(command)}")
            if done.returncode != expected:
                failures.append(f"{command}: exit {done.returncode}, the page says {expected}: {done.stderr.strip()[-400:]}")
            skipped_files -= outputs
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ran, skipped, failures


total_ran, all_failures = 0, []
for page in pages:
    print(os.path.relpath(page, repo))
    ran, skipped, failures = run_page(page)
    print(f"  {ran} run, {skipped} skipped, {len(failures)} failed")
    total_ran += ran
    all_failures += [f"{os.path.relpath(page, repo)}: {f}" for f in failures]
if brought:
    shutil.rmtree(brought, ignore_errors=True)
for f in all_failures:
    print("FAIL:", f)
if total_ran < 10:
    print("FAIL: fewer than 10 commands ran: the test proves little")
    sys.exit(1)
sys.exit(1 if all_failures else 0)
