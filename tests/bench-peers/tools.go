//go:build tools

// Package tools pins peer IPAM plugins that netendpoint is benchmarked
// against. Nothing here is compiled into the product; scripts/bench-peers.sh
// builds the binaries listed below into tests/bin/cni.
package tools

import (
	// whereabouts' CNI IPAM plugin (package main lives directly in cmd/).
	_ "github.com/k8snetworkplumbingwg/whereabouts/cmd"
)
