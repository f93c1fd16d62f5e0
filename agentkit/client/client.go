// Package client is a typed client of NetworkEndpoints on client-go's REST
// client, with the ListerWatcher an informer needs: what a generated
// clientset would give, for the one resource agents read.
package client

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	v1 "netendpoint.dev/agentkit/api/v1alpha1"
)

// Scheme holds the types of package v1alpha1 (and the meta types a list
// and a watch need).
var Scheme = runtime.NewScheme()

func init() {
	if err := v1.AddToScheme(Scheme); err != nil {
		panic(err) // only static registrations: cannot fail at run time
	}
	metav1.AddToGroupVersion(Scheme, metav1.SchemeGroupVersion)
}

// Client reads, watches and patches NetworkEndpoints. It implements
// ack.Endpoints.
type Client struct {
	rest rest.Interface
}

// New builds a Client from cfg (for example rest.InClusterConfig or
// clientcmd.BuildConfigFromFlags). cfg is copied, not changed.
func New(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &v1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(Scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &Client{rest: rc}, nil
}

// Get reads one NetworkEndpoint by name.
func (c *Client) Get(ctx context.Context, name string) (*v1.NetworkEndpoint, error) {
	out := &v1.NetworkEndpoint{}
	err := c.rest.Get().Resource(v1.Resource).Name(name).Do(ctx).Into(out)
	return out, err
}

// List lists NetworkEndpoints. Every list makes the API server read every
// lease: a per-node agent lists once, with its node's field selector, and
// then watches.
func (c *Client) List(ctx context.Context, opts metav1.ListOptions) (*v1.NetworkEndpointList, error) {
	out := &v1.NetworkEndpointList{}
	err := c.rest.Get().Resource(v1.Resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// Watch watches NetworkEndpoints.
func (c *Client) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest.Get().Resource(v1.Resource).VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

// Create creates a NetworkEndpoint. Agents never create leases; tests do.
func (c *Client) Create(ctx context.Context, ep *v1.NetworkEndpoint) (*v1.NetworkEndpoint, error) {
	out := &v1.NetworkEndpoint{}
	err := c.rest.Post().Resource(v1.Resource).Body(ep).Do(ctx).Into(out)
	return out, err
}

// Delete requests the deletion of a NetworkEndpoint. Agents never delete
// leases; tests do.
func (c *Client) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.rest.Delete().Resource(v1.Resource).Name(name).Body(&opts).Do(ctx).Error()
}

// Patch applies a patch of type pt to name.
func (c *Client) Patch(ctx context.Context, name string, pt types.PatchType, data []byte) (*v1.NetworkEndpoint, error) {
	out := &v1.NetworkEndpoint{}
	err := c.rest.Patch(pt).Resource(v1.Resource).Name(name).Body(data).Do(ctx).Into(out)
	return out, err
}

// PatchJSON applies an RFC 6902 JSON patch (ack.Endpoints).
func (c *Client) PatchJSON(ctx context.Context, name string, patch []byte) error {
	_, err := c.Patch(ctx, name, types.JSONPatchType, patch)
	return err
}

// ListWatch is the ListerWatcher of the endpoints (never the holds) that
// match fieldSelector, for example v1alpha1.NodeSelector(node) for a
// per-node agent, or "" for every node. Watches ask for bookmarks.
func (c *Client) ListWatch(fieldSelector string) cache.ListerWatcher {
	tweak := func(o *metav1.ListOptions) {
		o.FieldSelector = fieldSelector
		o.LabelSelector = v1.EndpointsOnly
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			o.AllowWatchBookmarks = true
			return c.Watch(ctx, o)
		},
	}
}
