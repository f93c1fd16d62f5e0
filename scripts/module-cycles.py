#!/usr/bin/env python3
"""Fails when a crate's module import graph has a cycle.

For every crate of the workspace (a directory with Cargo.toml and src/),
each top-level module of its library (src/<m>.rs or src/<m>/) is a node,
and a reference `crate::<other>` in its code (not its comments, nor `#[cfg(test)]`
modules and the crate's `tests` module) an edge; `use crate::{a, b::C}`
counts each group member. The crate root (lib.rs, or main.rs without a
lib.rs) is a node too, named `crate`, with an edge to every module it
declares. A module that reaches the root itself (`crate::Foo` where `Foo`
is no module but an item of lib.rs/main.rs, or re-exported there; `super::`
that climbs to the root) has an edge into it, which closes a cycle through
the root: the root wires the modules, and a module never reaches back up.
Binaries (src/bin/) are left out. Prints each crate's graph size, and every
cycle found, as `crate: a -> b -> a`.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT_NODE = "crate"
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
REF = re.compile(r"\bcrate::(?:(" + IDENT + r")|\{)")
SUPERS = re.compile(r"\b((?:super::)+)(?:(" + IDENT + r")|\{)")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(" + IDENT + r")\s*[;{]", re.M)


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


def group_heads(text, start):
    """The first path segment of each member of the `{...}` group opening at `start`."""
    depth = 0
    member = ""
    heads = []
    for ch in text[start:]:
        if ch == "{":
            depth += 1
            if depth == 1:
                continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and ch == ",":
            heads.append(member)
            member = ""
        else:
            member += ch
    heads.append(member)
    out = []
    for m in heads:
        head = re.match(r"\s*(" + IDENT + r")", m)
        if head:
            out.append(head.group(1))
    return out


def root_refs(text, depth):
    """Heads of the paths in `text` that start at the crate root: `crate::<head>`,
    and `super::` repeated `depth` times or more (a file `depth` levels below the root)."""
    heads = []
    for m in REF.finditer(text):
        heads.extend([m.group(1)] if m.group(1) else group_heads(text, m.end() - 1))
    for m in SUPERS.finditer(text):
        if m.group(1).count("super::") < depth:
            continue
        heads.extend([m.group(2)] if m.group(2) else group_heads(text, m.end() - 1))
    return ["self" if h == "super" else h for h in heads]


def depth_of(src, path):
    """How many `super::` climb from the file at `path` to the crate root."""
    rel = os.path.relpath(path, src).split(os.sep)
    return len(rel) - (1 if rel[-1] == "mod.rs" else 0)


def root_file(src):
    """The crate root: lib.rs, or main.rs for a crate that is only a binary."""
    for name in ("lib.rs", "main.rs"):
        if os.path.isfile(os.path.join(src, name)):
            return os.path.join(src, name)
    return None


def code_of(path):
    """The file's code without `#[cfg(test)]` modules and comments (doc links included)."""
    with open(path, encoding="utf-8") as fh:
        text = strip_tests(fh.read())
    return re.sub(r"//[^\n]*", "", text)


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
                for head in root_refs(code_of(f), depth_of(src, f)):
                    if head in mods:
                        if head != name:
                            deps.add(head)
                    else:
                        # An item of the root itself, or one it re-exports.
                        deps.add(ROOT_NODE)
            graph[name] = deps
        root = root_file(src)
        if root is not None:
            graph[ROOT_NODE] = {m for m in MOD_DECL.findall(code_of(root)) if m in mods}
        edges = sum(len(v) for k, v in graph.items() if k != ROOT_NODE)
        upward = sum(1 for k, v in graph.items() if k != ROOT_NODE and ROOT_NODE in v)
        found = cycles(graph)
        print(f"{crate}: {len(mods)} modules, {edges} imports, {upward} into the root, {len(found)} cycles")
        for c in found:
            bad += 1
            print(f"  cycle: {' -> '.join(c + (c[0],))}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
