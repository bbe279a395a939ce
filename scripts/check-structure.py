#!/usr/bin/env python3
"""The house rules ARCHITECTURE.md states, checked (CI runs this): no Rust source file over
700 lines, no import circle between a crate's top-level modules, and the server never links
the simulator; for Python, no file over 450 lines or function over 90, no import circle
between the package's modules (imports inside functions count: a circle there is the same
tangle, only deferred), and the client (`weave_client` outside `runtime/`) imports only the
standard library and itself at module level (extras such as Ray are imported inside the
functions that need them). Prints each
breach and exits 1 if there is one."""

import ast
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


def circles(uses, where):
    """Each import circle in `uses` (module -> the modules it imports), once, from its least name."""
    def walk(start, node, path):
        for n in sorted(uses[node]):
            if n == start:
                breaches.append(f"{where}: import circle {' -> '.join(path + [n])}")
            elif n not in path and n > start:
                walk(start, n, path + [n])

    for m in sorted(uses):
        walk(m, m, [m])


for src in sorted(glob.glob("crates/*/src")):
    mods = modules(src)
    circles({m: {n for n in mods if n != m and re.search(rf"crate::{n}\b|use crate::\{{[^}}]*\b{n}::", t)}
             for m, t in mods.items()}, src)

PY_MAX_FUNCTION_LINES = 90
PY_MAX_LINES = 450


def python_breaches(path, text, client):
    """A Python file's breaches: length, long functions, and (for the client) module-level
    imports from outside the standard library."""
    out = []
    n = text.count("\n")
    if n > PY_MAX_LINES:
        out.append(f"{path}: {n} lines (at most {PY_MAX_LINES}: split it along a seam)")
    try:
        tree = ast.parse(text, path)
    except SyntaxError as e:
        return out + [f"{path}: does not parse: {e}"]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > PY_MAX_FUNCTION_LINES:
                out.append(f"{path}:{node.lineno}: function `{node.name}` is {length} lines "
                           f"(at most {PY_MAX_FUNCTION_LINES}: split it)")
    if client:
        for node in tree.body:
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("runtime"):
                names = ["weave_client.runtime"]
            for name in names:
                top = name.split(".")[0]
                if name.startswith("weave_client.runtime") or top not in sys.stdlib_module_names:
                    out.append(f"{path}:{node.lineno}: the client imports `{name}` at module level "
                               "(standard library only; import an extra inside the function that needs it)")
    return out


for path in sorted(glob.glob("python/weave_client/**/*.py", recursive=True) + glob.glob("python/tests/*.py")
                   + glob.glob("python/examples/*.py") + glob.glob("scripts/*.py")):
    client = path.startswith("python/weave_client/") and "/runtime/" not in path
    with open(path) as f:
        breaches += python_breaches(path, f.read(), client)



def python_module(path):
    """`python/weave_client/runtime/x.py` -> `weave_client.runtime.x` (a package's `__init__`: the package)."""
    parts = os.path.relpath(path, "python")[:-3].split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_imports(path, me, known):
    """The package's modules `path` (module `me`) imports, anywhere in the file."""
    package = me if path.endswith("__init__.py") else me.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            # `from pkg import mod` names a module when `pkg.mod` is one.
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != me}
    return out


py_files = {python_module(p): p for p in glob.glob("python/weave_client/**/*.py", recursive=True)}
circles({m: python_imports(p, m, py_files) for m, p in py_files.items()}, "python")

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
