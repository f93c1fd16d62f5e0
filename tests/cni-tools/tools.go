//go:build tools

// Package tools pins the reference CNI plugins and cnitool that netendpoint's
// tests drive. Nothing here is compiled into the product; `make cni-tools`
// builds the binaries listed below into tests/bin/cni.
package tools

import (
	_ "github.com/containernetworking/cni/cnitool"
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
	_ "github.com/containernetworking/plugins/plugins/main/macvlan"
	_ "github.com/containernetworking/plugins/plugins/main/ptp"
	_ "github.com/containernetworking/plugins/plugins/meta/portmap"
)
