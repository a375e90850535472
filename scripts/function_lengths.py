#!/usr/bin/env python3
"""Functions longer than a limit in remat's modules (tests/ and bench/ aside).

    scripts/function_lengths.py [--limit 60] [ROOT]

Lists every function body (a brace block at namespace or class level whose
heading has a parameter list) longer than --limit lines, longest first, and
exits 1 if there is one: the house rule is that a function reads in one
screen. Lambdas count toward the function holding them. A heuristic over
the text, not a parser: comments, strings and character literals are
blanked first.
"""
import argparse
import os
import re
import sys

MODULES = ["core", "autodiff", "h5", "comm", "datasets", "optim", "zoo", "strategies", "weights", "step",
           "finetune", "pipeline", "train", "estimate", "harness"]


def code_of(text):
    """The text with comments, strings and character literals blanked (lines kept)."""
    text = re.sub(r'R"\((.|\n)*?\)"', lambda m: '""' + "\n" * m.group(0).count("\n"), text)
    text = re.sub(r"/\*(.|\n)*?\*/", lambda m: "\n" * m.group(0).count("\n"), text)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", text)


def functions(path):
    """(lines, first line, heading) of each outermost function body in `path`."""
    lines = code_of(open(path, errors="replace").read()).split("\n")
    stack, found = [], []
    for i, line in enumerate(lines):
        for at, ch in enumerate(line):
            if ch == "{":
                head = line[:at].strip() or (lines[i - 1].strip() if i else "")
                if re.search(r"\bnamespace\b|\bextern\b", head):
                    kind = "scope"
                elif re.search(r"\b(class|struct|union|enum)\b", head) and "(" not in head:
                    kind = "scope"
                elif re.search(r"\)\s*(const|override|noexcept|final|\s)*$", head) or re.search(r"\)\s*:", head):
                    kind = "function"
                else:
                    kind = "block"
                stack.append((kind, i, head))
            elif ch == "}" and stack:
                kind, start, head = stack.pop()
                if kind == "function" and all(k == "scope" for k, _, _ in stack):
                    found.append((i - start + 1, start + 1, head))
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    p.add_argument("--limit", type=int, default=60)
    a = p.parse_args()
    long = []
    for module in MODULES:
        for folder, _, files in os.walk(os.path.join(a.root, module)):
            for name in sorted(files):
                if name.endswith((".cpp", ".hpp")):
                    path = os.path.join(folder, name)
                    for n, line, head in functions(path):
                        if n > a.limit:
                            long.append((n, os.path.relpath(path, a.root), line, head))
    for n, path, line, head in sorted(long, reverse=True):
        print(f"{n:4d} lines  {path}:{line}  {head[:90]}")
    if long:
        print(f"{len(long)} function(s) over {a.limit} lines")
        return 1
    print(f"no function over {a.limit} lines in {', '.join(MODULES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
