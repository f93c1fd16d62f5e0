//go:build tools

// Package tools pins the OCI registry of the release rig and its client:
// distribution (the registry server, started on a loopback address by
// scripts/registry.sh) and oras (pushes a release's image indexes from
// their OCI archives, and attaches its SBOMs and signatures to them as
// referrers). scripts/release-tools.sh builds both into tests/bin. Nothing
// here is compiled into the product.
package tools

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
	_ "oras.land/oras/cmd/oras"
)
