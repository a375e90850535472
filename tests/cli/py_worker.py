#!/usr/bin/env python3
"""Runs a shell test's Python scripts in one interpreter (lib.sh's `py`).

Importing torch takes 2 to 5 seconds; a test that runs fifty small scripts
spent most of its time doing it again and again. This worker imports each
module once and runs every script it is asked for as `python3 SCRIPT ARGS...`
would: as __main__, with sys.argv, the caller's directory, its own folder
first on sys.path, its stdout and stderr (file descriptors included) into the
files named, and its exit status answered.

Its one argument is a scratch folder for those files, removed when stdin
closes (the test's shell has exited). Requests arrive on stdin, each a run of NUL-terminated fields: the count N of
arguments, the directory, the stdout file, the stderr file, then SCRIPT and
its arguments (N fields). The exit status goes back on the descriptor that
was stdout when the worker started, one line each.

Scripts share the interpreter, so one that changes process-wide state that
the next could read must undo it; torch's default dtype is reset to float32
before each. A script that sets the environment before torch is imported
(tests/reference/precision_reference.py) must run on its own.
"""
import ctypes
import gc
import os
import runpy
import shutil
import sys
import traceback


def fields(stream):
    """The NUL-terminated fields of stdin, one at a time."""
    buf = b""
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            return
        buf += chunk
        *done, buf = buf.split(b"\0")
        for f in done:
            yield os.fsdecode(f)


def run(cwd, out, err, argv):
    os.chdir(cwd)
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    if "torch" in sys.modules:
        sys.modules["torch"].set_default_dtype(sys.modules["torch"].float32)
    saved = os.dup(1), os.dup(2)
    with open(out, "w") as o, open(err, "w") as e:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
        try:
            runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as exit_:
            code = exit_.code
            if code is None:
                code = 0
            elif isinstance(code, bool):  # sys.exit(a > b), as a python3 process exits
                code = int(code)
            elif not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
        except BaseException:  # a script's crash is its failure, not the worker's
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
            sys.path.pop(0)
            gc.collect()  # files the script left open are closed before the shell's next command
    return code


def keep_freed_memory():
    """Lets glibc keep freed memory for the next allocation instead of handing it back.

    By default glibc maps each block over a few MiB afresh and unmaps it when freed: every
    tensor a float64 reference computes faults its pages in again, a third of the time of a
    check at small's sizes. A steady heap (no trimming, no per-block mapping up to 32 MiB)
    reuses them. Only this process: remat's own runs keep glibc's defaults.
    """
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
        libc.mallopt(M_TOP_PAD, 64 << 20)
    except (OSError, AttributeError):  # not glibc: its defaults stay
        pass


def main():
    keep_freed_memory()
    scratch = sys.argv[1]
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    stream = fields(sys.stdin.buffer)
    for count in stream:
        cwd, out, err = next(stream), next(stream), next(stream)
        argv = [next(stream) for _ in range(int(count))]
        answers.write(f"{run(cwd, out, err, argv)}\n")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
