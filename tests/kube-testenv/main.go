// Command kube-testenv runs a real kube-apiserver, backed by an embedded etcd,
// on loopback (or --address) for netendpoint's integration tests, demo and benchmarks.
//
//	kube-testenv serve --dir DIR       run until SIGTERM/SIGINT; writes DIR/kubeconfig and DIR/ready
//	kube-testenv wait --dir DIR        block until DIR/ready exists (or the server died)
//	kube-testenv sa-kubeconfig ...     write a kubeconfig holding a ServiceAccount token
//
// The API server is k8s.io/kubernetes/cmd/kube-apiserver used as a library, with
// RBAC authorization, a static admin token (group system:masters), and
// ServiceAccount token signing so that tests can act as limited identities.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "wait":
		err = wait(os.Args[2:])
	case "sa-kubeconfig":
		err = saKubeconfig(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube-testenv %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kube-testenv serve|wait|sa-kubeconfig --dir DIR [flags]")
	os.Exit(2)
}
