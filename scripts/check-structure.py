#!/usr/bin/env python3
"""The house rules ARCHITECTURE.md states, checked (CI runs this): no Rust source file over
700 lines, no import circle between a crate's top-level modules, and the server never links
the simulator. Prints each breach and exits 1 if there is one."""

import glob
import os
import re
import subprocess
import sys

MAX_LINES = 700
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
os.chdir(root)
breaches = []

for path in sorted(glob.glob("crates/*/src/**/*.rs", recursive=True)):
    with open(path) as f:
        n = sum(1 for _ in f)
    if n > MAX_LINES:
        breaches.append(f"{path}: {n} lines (at most {MAX_LINES}: split it along a seam)")


def modules(src):
    """Each top-level module of a crate with the text of its file and its submodules."""
    out = {}
    for f in glob.glob(os.path.join(src, "*.rs")):
        name = os.path.basename(f)[:-3]
        if name in ("lib", "main"):
            continue
        text = open(f).read()
        sub = os.path.join(src, name)
        for g in glob.glob(os.path.join(sub, "**", "*.rs"), recursive=True):
            text += open(g).read()
        out[name] = text
    return out


for src in sorted(glob.glob("crates/*/src")):
    mods = modules(src)
    uses = {m: {n for n in mods if n != m and re.search(rf"crate::{n}\b|use crate::\{{[^}}]*\b{n}::", t)}
            for m, t in mods.items()}

    def walk(start, node, path):
        for n in sorted(uses[node]):
            if n == start:
                breaches.append(f"{src}: import circle {' -> '.join(path + [n])}")
            elif n not in path and n > start:
                walk(start, n, path + [n])

    for m in sorted(mods):
        walk(m, m, [m])

tree = subprocess.run(["cargo", "tree", "-p", "weave-server", "--edges", "normal", "--prefix", "none", "--locked"],
                      capture_output=True, text=True)
if tree.returncode != 0:
    breaches.append(f"cargo tree failed: {tree.stderr.strip()}")
elif any(line.startswith("weave-sim ") for line in tree.stdout.splitlines()):
    breaches.append("weave-server depends on weave-sim (the server must not link the replay)")

for b in breaches:
    print(b)
print(f"structure: {len(breaches)} breach(es)")
sys.exit(1 if breaches else 0)
