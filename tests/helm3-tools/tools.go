//go:build tools

// Package tools pins Helm 3, which most users still run beside Helm 4:
// scripts/tools.sh builds helm.sh/helm/v3/cmd/helm from this module as
// tests/bin/helm3, and scripts/chart-test.sh installs the chart with it.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
