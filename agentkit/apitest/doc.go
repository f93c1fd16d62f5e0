// Package apitest holds the kit's tests against a real kube-apiserver with
// the netendpoint CRDs installed (make test starts one). They are built
// with the tag apiserver and read the kubeconfig from
// NETENDPOINT_KUBECONFIG; without it they fail rather than pass unseen.
package apitest
