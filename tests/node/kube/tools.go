//go:build tools

// Package tools pins the node's Kubernetes binaries to the release of the test
// API server: build.sh builds kubelet, kube-controller-manager and
// kube-scheduler from k8s.io/kubernetes in this module, whose replace block
// matches tests/kube-testenv/go.mod.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
