package v1alpha1

// Labels, selectors and field paths of NetworkEndpoint. Every value is
// asserted against the Rust definitions by crd/testdata/vectors.json.
const (
	// LabelPool carries the pool name.
	LabelPool = "netendpoint.dev/pool"
	// LabelNode carries the node name.
	LabelNode = "netendpoint.dev/node"
	// LabelPodNamespace carries the Pod's namespace.
	LabelPodNamespace = "netendpoint.dev/pod-namespace"
	// LabelPodName carries the Pod's name.
	LabelPodName = "netendpoint.dev/pod-name"
	// LabelPodUID carries the Pod's UID.
	LabelPodUID = "netendpoint.dev/pod-uid"
	// LabelRole is set to RoleHold on a sticky hold, which is not an endpoint.
	LabelRole = "netendpoint.dev/role"
	// RoleHold is the LabelRole value of a sticky hold.
	RoleHold = "hold"
	// EndpointsOnly is the label selector an agent watches with: every
	// NetworkEndpoint that is an endpoint, never a hold.
	EndpointsOnly = "netendpoint.dev/role!=hold"
	// LabelNetwork carries the CNI network (spec.network).
	LabelNetwork = "netendpoint.dev/network"
	// LabelIPFamily carries "4" or "6".
	LabelIPFamily = "netendpoint.dev/ip-family"
	// LabelBlock carries the address block of the lease (names.BlockLabelValue).
	LabelBlock = "netendpoint.dev/block"

	// FieldNode is the selectable field of the node (a per-node agent's
	// field selector is FieldNode + "=" + its node).
	FieldNode = "spec.node"
	// FieldContainerID is the selectable field of the sandbox's container ID.
	FieldContainerID = "spec.containerID"

	// FinalizerStickyHold is the finalizer of a sticky lease. It belongs to
	// netendpoint: an agent never adds or removes it.
	FinalizerStickyHold = "netendpoint.dev/sticky-hold"
)

// NodeSelector is the field selector of the leases of node, as a per-node
// agent watches them.
func NodeSelector(node string) string { return FieldNode + "=" + node }
