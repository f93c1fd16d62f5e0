#!/usr/bin/env python3
"""Fails when a crate's module import graph has a cycle.

For every crate of the workspace (a directory with Cargo.toml and src/),
each top-level module of its library (src/<m>.rs or src/<m>/) is a node,
and a reference `crate::<other>` in its code (not its comments, nor `#[cfg(test)]`
modules and the crate's `tests` module) an edge. The crate root (lib.rs,
main.rs) and binaries (src/bin/) tie the modules together and are left out.
Prints each crate's graph size, and every cycle found, as
`crate: a -> b -> a`.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")


def strip_tests(text):
    """The text without `#[cfg(test)] mod ... { ... }` blocks (brace counted)."""
    out = []
    i = 0
    while True:
        j = text.find("#[cfg(test)]", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = text.find("{", j)
        semi = text.find(";", j)
        if k < 0 or (0 <= semi < k):
            i = semi + 1 if semi >= 0 else len(text)
            continue
        depth = 0
        for m in range(k, len(text)):
            if text[m] == "{":
                depth += 1
            elif text[m] == "}":
                depth -= 1
                if depth == 0:
                    i = m + 1
                    break
        else:
            return "".join(out)


def modules(src):
    """Top-level modules of a crate's src/: name -> list of files."""
    mods = {}
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry in ("lib.rs", "main.rs", "bin", "tests"):
            continue
        if entry.endswith(".rs"):
            mods.setdefault(entry[:-3], []).append(path)
        elif os.path.isdir(path):
            for d, _, files in os.walk(path):
                if os.path.basename(d) == "tests":
                    continue
                for f in files:
                    if f.endswith(".rs") and f != "tests.rs":
                        mods.setdefault(entry, []).append(os.path.join(d, f))
    return mods


def cycles(graph):
    """Every elementary cycle found by DFS, each once (rotated to its smallest node)."""
    found = set()
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    cyc = path[:]
                    m = cyc.index(min(cyc))
                    found.add(tuple(cyc[m:] + cyc[:m]))
                elif nxt not in path and nxt > start:
                    stack.append((nxt, path + [nxt]))
    return sorted(found)


def main():
    bad = 0
    for crate in sorted(os.listdir(ROOT)):
        src = os.path.join(ROOT, crate, "src")
        if not (os.path.isfile(os.path.join(ROOT, crate, "Cargo.toml")) and os.path.isdir(src)):
            continue
        mods = modules(src)
        graph = {}
        for name, files in mods.items():
            deps = set()
            for f in files:
                with open(f, encoding="utf-8") as fh:
                    text = strip_tests(fh.read())
                # Comments (doc links included) import nothing.
                text = re.sub(r"//[^\n]*", "", text)
                deps.update(m for m in REF.findall(text) if m in mods and m != name)
            graph[name] = deps
        edges = sum(len(v) for v in graph.values())
        found = cycles(graph)
        print(f"{crate}: {len(graph)} modules, {edges} imports, {len(found)} cycles")
        for c in found:
            bad += 1
            print(f"  cycle: {' -> '.join(c + (c[0],))}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
