//go:build tools

// Package tools pins kubelet to the release of the test API server: build.sh
// builds k8s.io/kubernetes/cmd/kubelet in this module, whose replace block
// matches tests/kube-testenv/go.mod.
package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
