//go:build tools

package main

// kubectl is built from the same k8s.io/kubernetes release as the server
// (scripts/tools.sh), so client and server versions match.
import _ "k8s.io/kubectl/pkg/cmd"
