package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// Group is the API group of every netendpoint resource.
	Group = "netendpoint.dev"
	// Version is the API version of NetworkEndpoint.
	Version = "v1alpha1"
	// Kind is the kind of a lease.
	Kind = "NetworkEndpoint"
	// Resource is the plural resource name of NetworkEndpoint.
	Resource = "networkendpoints"
)

var (
	// SchemeGroupVersion is netendpoint.dev/v1alpha1.
	SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}
	// GroupVersionResource of NetworkEndpoint, for dynamic clients and informers.
	GroupVersionResource = SchemeGroupVersion.WithResource(Resource)
	// GroupVersionKind of NetworkEndpoint.
	GroupVersionKind = SchemeGroupVersion.WithKind(Kind)

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds NetworkEndpoint and NetworkEndpointList to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &NetworkEndpoint{}, &NetworkEndpointList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
