//go:build tools

// Package tools pins helm, which `make test` uses to lint the chart in
// deploy/helm/netendpoint and to render it (scripts/tools.sh builds it into
// tests/bin/helm). Nothing here is compiled into the product.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
