# netendpoint: see README.md. Every target installs what it needs on a fresh
# machine (apt packages, Go-built test tools, the cargo build) and reuses the
# Go and cargo caches on later runs.

SHELL := /bin/bash
TESTENV ?= $(CURDIR)/.testenv
CARGO_TEST_THREADS ?= 2
export CARGO_TERM_COLOR ?= never

.PHONY: all deps tools release-tools build crd deploy lint audit unit test agent-conformance images release release-check e2e e2e-upgrade e2e-release demo demo-sticky demo-node bench testenv-start testenv-stop clean

all: build

deps:
	@scripts/deps.sh

tools: deps
	@scripts/tools.sh

build: deps
	cargo build --workspace --bins

# The CRDs, as crdgen prints them, into the chart, then deploy/ from it.
crd: tools
	cargo run -q -p netendpoint-crd --bin crdgen > deploy/helm/netendpoint/templates/crd.yaml
	@scripts/render-deploy.sh

# deploy/ (the kustomize tree) rendered from the Helm chart
# deploy/helm/netendpoint, its one source; make test fails when it is stale.
deploy: tools
	@scripts/render-deploy.sh

# fmt, clippy and the dependency audit; fails under CI=true when fmt or
# clippy is missing. `make test` runs fmt and clippy only.
lint:
	@scripts/lint.sh
	@scripts/audit.sh

# The dependency audit alone (deny.toml): cargo-deny, pinned, compiled once
# into a cache outside the repository (13 to 25 min on 2 cores the first time).
audit:
	@scripts/audit.sh

# Every test that needs no API server: the unit tests of every crate, and
# the integration tests of every crate but netendpoint-tests (whose tests/
# all run against the server). Needs nothing but cargo.
unit:
	cargo test --workspace --exclude netendpoint-tests --tests
	cargo test -p netendpoint-tests --lib --bins

# Runs all tests: unit tests, then integration tests against a real
# kube-apiserver + etcd and the reference CNI plugins. The server is stopped
# even when tests fail.
test: tools build
	@scripts/test.sh

# The agent conformance suite (watcher-example/README.md, "Conformance")
# against any agent that follows its contract:
#   make agent-conformance AGENT='<command>' [SUITES=seed,stress,restart,uid]
# Starts its own API server; prints a verdict per suite, fails on any failure.
agent-conformance: tools build
	@scripts/agent-conformance.sh

# The images of deploy/ from the workspace, with no registry: static (musl)
# binaries packed as the Containerfiles lay them out, as OCI archives in
# target/images, with an overlay of deploy/ that uses them
# (docs/install.md, "Build the images").
images: deps
	@scripts/images.sh

# The tools of a release, beyond `make images`'s: the aarch64 cross compiler
# and Rust target, helm, syft and cosign. Not part of `make test`, which never
# cross-builds.
release-tools:
	@scripts/release-tools.sh

# A release in target/release-$(VERSION): a linux/amd64 + linux/arm64 image
# index per image, the chart pinned to them by digest, an SBOM per image, the
# CHANGELOG entry and SHA256SUMS, every file signed with the cosign key
# RELEASE_SIGNING_KEY (and COSIGN_PASSWORD; refused without), checked
# (scripts/release-verify.sh). docs/install.md, "Releases".
release: release-tools
	@scripts/release.sh "$(VERSION)"

# Builds the release of $(VERSION) (default: CHANGELOG.md's newest) twice, the second
# time in a target directory of its own, and compares the index digests, the
# image archives, the chart and SBOM bytes; signs both with a throwaway key
# unless RELEASE_SIGNING_KEY is given. Not part of `make test`.
release-check: release-tools
	@scripts/release-check.sh "$(VERSION)"

# A release as users receive it (scripts/e2e-release.sh): `make release`
# with a key of the test, pushed to a local OCI registry (distribution, on a
# loopback address), verified from there with the public key (a tampered
# chart and a tampered image refused), and installed on the real node with
# `helm install oci://...`, containerd pulling by digest. Needs root.
e2e-release: release-tools
	@scripts/e2e-release.sh

# A real node (kubelet, containerd, runc; tests/node) with netendpoint
# installed from `make images` through deploy/, as a user installs it, runs
# the scenarios of docs/testing.md, "A real node". Needs root; torn down on
# exit, pass or fail.
e2e: tools
	@scripts/e2e.sh

# An upgrade on the real node from the release before (a fixed earlier
# commit, released by this tree's scripts/release.sh) to this tree's
# release, both signed, pushed to a local registry and verified there, their
# images pulled by digest; needs root.
e2e-upgrade: tools release-tools
	@scripts/registry-tools.sh
	@scripts/e2e-upgrade.sh

# The seed scenario on the real node, driven by kubectl, with the leases and
# the agent's log of the reused IP printed (scenario A of `make e2e`).
demo-node: tools
	@E2E_SCENARIOS=A E2E_SHOW=1 scripts/e2e.sh

demo: tools build
	@scripts/demo.sh

demo-sticky: tools build
	@scripts/demo-sticky.sh

# The benchmark harness against the real API server (BENCHMARKS.md), then N
# pods to Running on the real node, netendpoint against host-local
# (BENCHMARKS-node.md; needs root). Figures only.
bench: tools
	@scripts/bench.sh
	@scripts/bench-node.sh

testenv-start: tools
	scripts/testenv.sh start $(TESTENV)

testenv-stop:
	scripts/testenv.sh stop $(TESTENV)

clean:
	cargo clean
	rm -rf tests/bin $(TESTENV) .node
