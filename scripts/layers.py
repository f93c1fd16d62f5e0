#!/usr/bin/env python3
"""Fails when a crate depends on a crate of a higher layer (part of `make lint`).

The workspace's layers, from the bottom: the vocabulary (`crd`, `lease`,
`netconf`, and the helpers `atomic-file`, `ops-http`), then the three
peers that talk to the cluster (the CNI plugin, the controller and
`kubectl-netendpoint`) beside the installer and the example agent, then
`tests`. A peer never depends on another peer: what two of them share
goes down into the vocabulary. Read from `cargo metadata` (normal and
build dependencies; dev-dependencies only feed tests).
"""

import json
import subprocess
import sys

VOCABULARY = {
    "netendpoint-crd",
    "netendpoint-lease",
    "netendpoint-netconf",
    "netendpoint-atomic-file",
    "netendpoint-ops-http",
}
PEERS = {
    "netendpoint-cni",
    "netendpoint-controller",
    "kubectl-netendpoint",
    "netendpoint-install",
    "watcher-example",
}


def main():
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    members = {p["name"]: p for p in meta["packages"]}
    problems = []
    unknown = set(members) - VOCABULARY - PEERS - {"netendpoint-tests"}
    for name in sorted(unknown):
        problems.append(f"{name} is in no layer: add it to scripts/layers.py")
    for name, p in sorted(members.items()):
        deps = {d["name"] for d in p["dependencies"] if d["kind"] in (None, "build") and d["name"] in members}
        if name in VOCABULARY:
            above = deps - VOCABULARY
        elif name in PEERS:
            above = deps & PEERS
        else:
            above = set()
        for d in sorted(above):
            problems.append(f"{name} depends on {d}, a crate of its own layer or above")
    for p in problems:
        print(f"layers: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"layers: {len(members)} crates; the peers depend only on the vocabulary")
    return 0


if __name__ == "__main__":
    sys.exit(main())
