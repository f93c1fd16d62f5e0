#!/usr/bin/env python3
"""Names in prose that cannot drift from the code (part of `make lint`).

Its sources of truth, read from the tree (and from `--help` of the built
binaries):
- the metrics the code registers (`registry.register*` calls, with the
  controller's `netendpoint` prefix, `_total` for counters and the unit
  suffix where one is given);
- the names of deploy/ (every `name:` of the rendered tree, the admission
  policies among them), the workspace's packages and binaries;
- the flags of the controller, the installer, the example agent and
  `kubectl-netendpoint`, and their environment variables;
- the Event reasons (`crd/src/events.rs`);
- the workspace members.

It fails when a name the docs give does not exist (a metric or a
`netendpoint-*` name, a test function the docs cite), or when one that
exists is not documented (a metric, an admission policy, a flag, an
environment variable, an Event reason, a workspace member). A family of
environment variables may be documented by one pattern
(`NETENDPOINT_INSTALL_<FLAG>`).

`--self-test` proves it can fail: in a copy of the tree, a planted
undocumented metric and a renamed policy must each make it fail.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

DOC_GLOBS = ["README.md", "BENCHMARKS*.md", "docs/*.md", "*/README.md", "deploy/examples/*.yaml"]
# The binaries whose flags are documented, by package.
BINARIES = [
    ("netendpoint-controller", "netendpoint-controller"),
    ("netendpoint-install", "netendpoint-install"),
    ("watcher-example", "watcher-example"),
    ("kubectl-netendpoint", "kubectl-netendpoint"),
]
# Names the docs may give that exist nowhere in the tree any more, and why.
RETIRED = {
    "netendpoint-controller-metrics": "a Service of earlier versions, which docs/install.md tells upgraders to delete",
}
# Metrics of other programs the docs cite (the API server's, in the benchmarks).
FOREIGN_METRIC = re.compile(r"^(apiserver|etcd|kubelet|process|go)_")
# Flags every clap binary has.
STANDARD_FLAGS = {"--help", "--version"}


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def docs(root):
    out = {}
    for g in DOC_GLOBS:
        for p in sorted(glob.glob(os.path.join(root, g))):
            rel = os.path.relpath(p, root)
            if rel.startswith(("target/", "tests/bin/")):
                continue
            out[rel] = read(root, rel)
    return out


def rust_sources(root):
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("target", "node_modules") and not d.startswith(".")]
        if os.path.relpath(dirpath, root) == "tests":
            dirnames[:] = [d for d in dirnames if d != "bin"]
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(dirpath, f)
                yield os.path.relpath(p, root), read(root, os.path.relpath(p, root))


def registered_metrics(root):
    """Exposition names of every registered metric (static reading)."""
    names = set()
    for rel, src in rust_sources(root):
        if "registry.register" not in src or "/tests/" in rel:
            continue
        prefix = ""
        m = re.search(r'Registry::with_prefix\("([a-z_]+)"\)', src)
        if m:
            prefix = m.group(1) + "_"
        # Field name -> metric kind, from the struct's field types.
        kinds = {}
        for fm in re.finditer(r"^\s*(?:pub\s+)?([a-z_]+):\s*(?:Family<[^,]+,\s*)?(Counter|Gauge|Histogram)\b", src, re.M):
            kinds[fm.group(1)] = fm.group(2)
        for call in re.finditer(r"registry\.register(_with_unit)?\(\s*\"([a-z_]+)\",(.*?)\);", src, re.S):
            with_unit, name, rest = call.group(1), call.group(2), call.group(3)
            field = re.search(r"m\.([a-z_]+)\.clone\(\)", rest)
            kind = kinds.get(field.group(1)) if field else None
            full = prefix + name
            if with_unit:
                unit = re.search(r"Unit::([A-Za-z]+)", rest)
                if unit:
                    full += "_" + unit.group(1).lower()
            if kind == "Counter":
                full += "_total"
            names.add(full)
    return names


def packages(root):
    """Workspace members (dirs), package names and binary names."""
    cargo = read(root, "Cargo.toml")
    members = re.search(r"members\s*=\s*\[(.*?)\]", cargo, re.S).group(1)
    dirs = re.findall(r'"([^"]+)"', members)
    names = set()
    for d in dirs:
        toml = read(root, os.path.join(d, "Cargo.toml"))
        names.update(re.findall(r'^name\s*=\s*"([^"]+)"', toml, re.M))
        for b in glob.glob(os.path.join(root, d, "src/bin/*")):
            names.add(os.path.basename(b).removesuffix(".rs"))
    return dirs, names


def deploy_names(root):
    names, policies = set(), set()
    for p in glob.glob(os.path.join(root, "deploy/*.yaml")) + glob.glob(os.path.join(root, "deploy/optional/*.yaml")) + glob.glob(
        os.path.join(root, "deploy/examples/*.yaml")
    ):
        text = read(root, os.path.relpath(p, root))
        names.update(re.findall(r"^\s*(?:- )?name:\s*\"?([a-z0-9.-]+)\"?\s*$", text, re.M))
        for doc in text.split("\n---"):
            if re.search(r"^kind:\s*ValidatingAdmissionPolicy\s*$", doc, re.M):
                m = re.search(r"^metadata:\s*\n\s+name:\s*([a-z0-9.-]+)", doc, re.M)
                if m:
                    policies.add(m.group(1))
    return names, policies


def event_reasons(root):
    return set(re.findall(r'pub const REASON_[A-Z_]+: &str = "([A-Za-z]+)";', read(root, "crd/src/events.rs")))


def binary_help(root, package, binary):
    out = subprocess.run(
        ["cargo", "run", "-q", "-p", package, "--bin", binary, "--", "--help"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    text = out.stdout + out.stderr
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text)) - STANDARD_FLAGS
    envs = set(re.findall(r"\[env: ([A-Z0-9_]+)", text))
    return flags, envs


def check(root, run_binaries=True):
    problems = []
    prose = docs(root)
    text = "\n".join(prose.values())
    comments = "\n".join(
        line for _, src in rust_sources(root) for line in src.splitlines() if line.strip().startswith(("///", "//!"))
    )
    dirs, pkgs = packages(root)
    crate_idents = {p.replace("-", "_") for p in pkgs}

    # Metrics, both ways.
    metrics = registered_metrics(root)
    for m in sorted(metrics):
        if not re.search(r"(?<![\w])" + re.escape(m) + r"(?![\w])", text):
            problems.append(f"metric {m} is registered but no doc names it")
    for m in sorted(set(re.findall(r"\bnetendpoint_[a-z0-9_]*[a-z0-9]", text + "\n" + comments))):
        base = re.sub(r"_(bucket|sum|count)$", "", m)
        if m in crate_idents or m in metrics or base in metrics:
            continue
        if any(m.startswith(c + "_") or m == c for c in crate_idents):
            continue
        problems.append(f"the docs name the metric {m}, which nothing registers")

    # Names of deploy/ and the workspace, and the admission policies.
    names, policies = deploy_names(root)
    known = names | pkgs
    for n in sorted(set(re.findall(r"(?<![\w./-])netendpoint-[a-z0-9-]*[a-z0-9](?![\w-])", text + "\n" + comments))):
        if n not in known and n not in RETIRED:
            problems.append(f"the docs name {n}, which is neither in deploy/ nor a package or binary")
    for p in sorted(policies):
        if p not in text:
            problems.append(f"admission policy {p} (deploy/) is not documented")

    # Test functions the docs cite by name.
    fns = set()
    for _, src in rust_sources(root):
        fns.update(re.findall(r"\bfn ([a-z][a-z0-9_]*)", src))
    for n in sorted(set(re.findall(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+){4,})`", text))):
        if n not in fns and n not in metrics and not FOREIGN_METRIC.match(n):
            problems.append(f"the docs cite {n}, which is no function of the workspace")

    # Event reasons.
    for r in sorted(event_reasons(root)):
        if not re.search(r"\b" + r + r"\b", text):
            problems.append(f"Event reason {r} is not documented")

    # Workspace members.
    readme = prose.get("README.md", "")
    for d in dirs:
        if f"`{d}/`" not in readme:
            problems.append(f"workspace member {d}/ is missing from README.md's layout")

    # Flags and their environment variables.
    if run_binaries:
        families = set(re.findall(r"\b([A-Z][A-Z0-9_]*_)<[A-Z_]+>", text))
        for package, binary in BINARIES:
            flags, envs = binary_help(root, package, binary)
            if not flags:
                problems.append(f"{binary} --help printed no flags (did it build?)")
            for f in sorted(flags):
                if not re.search(re.escape(f) + r"(?![\w-])", text):
                    problems.append(f"{binary}: flag {f} is not documented")
            for e in sorted(envs):
                if re.search(r"\b" + e + r"\b", text) or any(e.startswith(fam) for fam in families):
                    continue
                problems.append(f"{binary}: environment variable {e} is not documented")
    return problems


def self_test(root):
    """A planted undocumented metric and a renamed policy each make the check fail."""
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "tree")
        # The files git knows or would add: never build output, a test
        # environment or a running node's sockets and pipes.
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, check=True, capture_output=True,
        ).stdout.decode().split("\0")
        for rel in filter(None, listed):
            src = os.path.join(root, rel)
            if os.path.isfile(src) and not os.path.islink(src):
                os.makedirs(os.path.dirname(os.path.join(copy, rel)), exist_ok=True)
                shutil.copy2(src, os.path.join(copy, rel))
        base = check(copy, run_binaries=False)
        if base:
            failures.append("the unchanged copy already fails: " + "; ".join(base))
        metrics = os.path.join(copy, "controller/src/metrics.rs")
        src = read(copy, "controller/src/metrics.rs")
        planted = src.replace(
            "Self { registry, ..m }",
            'registry.register("planted_gauge", "planted", m.leader.clone());\n        Self { registry, ..m }',
            1,
        )
        with open(metrics, "w", encoding="utf-8") as f:
            f.write(planted)
        if not any("netendpoint_planted_gauge" in p for p in check(copy, run_binaries=False)):
            failures.append("a planted undocumented metric went unnoticed")
        with open(metrics, "w", encoding="utf-8") as f:
            f.write(src)
        policies = os.path.join(copy, "deploy/admission-policies.yaml")
        text = read(copy, "deploy/admission-policies.yaml")
        renamed = re.sub(r"(kind: ValidatingAdmissionPolicy\nmetadata:\n\s+name: )netendpoint-need\b", r"\1netendpoint-needs-renamed", text, 1)
        if renamed == text:
            failures.append("could not rename the policy netendpoint-need in the copy")
        with open(policies, "w", encoding="utf-8") as f:
            f.write(renamed)
        if not any("netendpoint-needs-renamed" in p for p in check(copy, run_binaries=False)):
            failures.append("a renamed admission policy went unnoticed")
    return failures


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if "--self-test" in sys.argv:
        failures = self_test(root)
        for f in failures:
            print(f"drift self-test: {f}", file=sys.stderr)
        if failures:
            return 1
        print("drift self-test: a planted metric and a renamed policy are both caught")
        return 0
    problems = check(root, run_binaries="--no-binaries" not in sys.argv)
    for p in problems:
        print(f"drift: {p}", file=sys.stderr)
    if problems:
        print(f"drift: {len(problems)} name(s) in prose out of step with the code", file=sys.stderr)
        return 1
    print("drift: every name in the docs exists, and every one that exists is documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
