//go:build tools

// Package tools pins cosign, which `make release` uses to sign the release's
// image archives, chart and SBOMs with the key it is given, and
// scripts/release-verify.sh uses to verify those signatures offline
// (scripts/release-tools.sh builds it into tests/bin/cosign). Nothing here is
// compiled into the product.
package tools

import (
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
)
