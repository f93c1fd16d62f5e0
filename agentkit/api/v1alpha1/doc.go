// Package v1alpha1 holds the Go types of netendpoint.dev/v1alpha1 that a
// dataplane agent reads: NetworkEndpoint, the lease of one IP address to one
// interface of one sandbox, with DeepCopy, scheme registration, the
// GroupVersionResource and the label and field names agents select by.
//
// The Rust crate netendpoint-crd defines the resource; this package mirrors
// the part agents read. The constants are checked against the Rust ones by
// the shared vectors of crd/testdata/vectors.json.
//
// An agent never writes a NetworkEndpoint's spec (the API server refuses
// it) and removes only its own finalizer, with package ack.
package v1alpha1
