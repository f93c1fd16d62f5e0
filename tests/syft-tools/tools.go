//go:build tools

// Package tools pins syft, which `make release` uses to write the SBOM of
// each image from the workspace's Cargo.lock (scripts/release-tools.sh
// builds it into tests/bin/syft). Nothing here is compiled into the product.
package tools

import (
	_ "github.com/anchore/syft/cmd/syft"
)
