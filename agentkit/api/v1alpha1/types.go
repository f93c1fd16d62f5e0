package v1alpha1

import (
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NetworkEndpoint is the lease of one IP address to one pod interface. The
// IP is free again only after the object is gone, that is after every agent
// removed its finalizer. Its name is derived from (pool, IP): see package
// names. A successor of the same address has the same name and another UID.
type NetworkEndpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NetworkEndpointSpec    `json:"spec"`
	Status *NetworkEndpointStatus `json:"status,omitempty"`
}

// NetworkEndpointList is a list of NetworkEndpoints.
type NetworkEndpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []NetworkEndpoint `json:"items"`
}

// NetworkEndpointSpec is immutable: the API server refuses any change.
type NetworkEndpointSpec struct {
	// Pool the IP was allocated from.
	Pool string `json:"pool"`
	// IP is the leased address in canonical text form.
	IP string `json:"ip"`
	// PrefixLength of the subnet the address belongs to.
	PrefixLength int32 `json:"prefixLength"`
	// Gateway of the range, if any.
	Gateway string `json:"gateway,omitempty"`
	// IfName is the interface inside the sandbox.
	IfName string `json:"ifName"`
	// ContainerID is the sandbox's container ID.
	ContainerID string `json:"containerID"`
	// Node the sandbox runs on (for a hold: the node of its first incarnation).
	Node string `json:"node"`
	// Pod behind the sandbox, when the runtime said so.
	Pod *PodRef `json:"pod,omitempty"`
	// Network is the CNI network that created the lease.
	Network string `json:"network,omitempty"`
	// ForceReleaseAfter bounds how long finalizers may hold a release once
	// the address is needed (e.g. "600s").
	ForceReleaseAfter string `json:"forceReleaseAfter,omitempty"`
	// Static is true when the sandbox asked for this address.
	Static *bool `json:"static,omitempty"`
	// Role is "Hold" for a sticky hold; empty on endpoints.
	Role string `json:"role,omitempty"`
	// Claim is the sticky identity of a hold or an incarnation.
	Claim *ClaimRef `json:"claim,omitempty"`
	// Incarnation of a sticky identity this endpoint is.
	Incarnation *int64 `json:"incarnation,omitempty"`
	// EndpointFinalizers (holds only): the finalizers each incarnation gets.
	EndpointFinalizers []string `json:"endpointFinalizers,omitempty"`
	// StickyFor (holds only): how long the hold lasts with no incarnation.
	StickyFor string `json:"stickyFor,omitempty"`
}

// RoleHoldSpec is the Spec.Role value of a sticky hold.
const RoleHoldSpec = "Hold"

// PodRef identifies the Pod behind a sandbox. There is no ownerReference:
// deleting the Pod object does not release the address.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// ClaimRef is the IPAMClaim of a sticky identity.
type ClaimRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// NetworkEndpointStatus is the state of a hold, written by netendpoint.
// Agents read nothing in it.
type NetworkEndpointStatus struct {
	Incarnation *int64              `json:"incarnation,omitempty"`
	Endpoint    string              `json:"endpoint,omitempty"`
	Request     *IncarnationRequest `json:"request,omitempty"`
	Phase       string              `json:"phase,omitempty"`
	Message     string              `json:"message,omitempty"`
}

// IncarnationRequest is a node's request for a hold's next incarnation.
type IncarnationRequest struct {
	Incarnation int64        `json:"incarnation"`
	Node        string       `json:"node"`
	ContainerID string       `json:"containerID"`
	IfName      string       `json:"ifName"`
	Pod         PodRef       `json:"pod"`
	Accepted    bool         `json:"accepted,omitempty"`
	Deadline    *metav1.Time `json:"deadline,omitempty"`
}

// Addr is the leased address, or false when spec.ip does not parse.
func (e *NetworkEndpoint) Addr() (netip.Addr, bool) {
	a, err := netip.ParseAddr(e.Spec.IP)
	return a, err == nil
}

// IsReleasing is true once deletion was requested: the address is being
// released and waits on the finalizers still present.
func (e *NetworkEndpoint) IsReleasing() bool { return e.DeletionTimestamp != nil }

// IsHold is true for a sticky hold, which agents skip.
func (e *NetworkEndpoint) IsHold() bool { return e.Spec.Role == RoleHoldSpec }

// HasFinalizer reports whether finalizer is on the object.
func (e *NetworkEndpoint) HasFinalizer(finalizer string) bool {
	for _, f := range e.Finalizers {
		if f == finalizer {
			return true
		}
	}
	return false
}
