//go:build apiserver

package apitest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"

	"netendpoint.dev/agentkit/ack"
	v1 "netendpoint.dev/agentkit/api/v1alpha1"
	"netendpoint.dev/agentkit/client"
	"netendpoint.dev/agentkit/names"
)

func kit(t *testing.T) *client.Client {
	t.Helper()
	path := os.Getenv("NETENDPOINT_KUBECONFIG")
	if path == "" {
		t.Fatal("NETENDPOINT_KUBECONFIG is not set: these tests need the real API server (make test starts one)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func unique(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// lease builds a well-formed lease of ip in pool on node.
func lease(pool, ip, node string, finalizers ...string) *v1.NetworkEndpoint {
	addr := netip.MustParseAddr(ip)
	return &v1.NetworkEndpoint{
		ObjectMeta: metav1.ObjectMeta{
			Name:       names.Endpoint(pool, addr),
			Labels:     labels(pool, node, addr),
			Finalizers: finalizers,
		},
		Spec: v1.NetworkEndpointSpec{Pool: pool, IP: ip, PrefixLength: 24, IfName: "eth0", ContainerID: unique("c"), Node: node},
	}
}

// labels are those the deployed admission policy requires of a lease: the
// spec's mirrors, its address family and its block.
func labels(pool, node string, addr netip.Addr) map[string]string {
	family := "4"
	if addr.Is6() {
		family = "6"
	}
	return map[string]string{
		v1.LabelPool: pool, v1.LabelNode: node, v1.LabelIPFamily: family, v1.LabelBlock: names.BlockLabelValue(addr),
	}
}

func mustCreate(t *testing.T, c *client.Client, ep *v1.NetworkEndpoint) *v1.NetworkEndpoint {
	t.Helper()
	out, err := c.Create(ctx(t), ep)
	if err != nil {
		t.Fatalf("create %s: %v", ep.Name, err)
	}
	t.Cleanup(func() {
		// Whatever the test left: finalizers off, then the object.
		cur, err := c.Get(context.Background(), out.Name)
		if err == nil && cur.UID == out.UID {
			_, _ = c.Patch(context.Background(), out.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
			_ = c.Delete(context.Background(), out.Name, metav1.DeleteOptions{})
		}
	})
	return out
}

func waitGone(t *testing.T, c *client.Client, name string, uid types.UID) {
	t.Helper()
	for i := 0; i < 100; i++ {
		cur, err := c.Get(ctx(t), name)
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != uid) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s (%s) still exists", name, uid)
}

func TestAnAckRemovesOnlyItsOwnFinalizerAndTheLastOneFreesTheName(t *testing.T) {
	c := kit(t)
	pool := unique("gokit")
	ep := mustCreate(t, c, lease(pool, "10.1.0.5", "n1", "a.example.com/x", "b.example.com/y"))
	if err := c.Delete(ctx(t), ep.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	releasing, err := c.Get(ctx(t), ep.Name)
	if err != nil || !releasing.IsReleasing() {
		t.Fatalf("the lease must be releasing, held by two finalizers: %v %v", releasing, err)
	}
	got, err := ack.RemoveFinalizer(ctx(t), c, releasing, "b.example.com/y")
	if err != nil || got != ack.Removed {
		t.Fatalf("got %v %v, want Removed", got, err)
	}
	after, err := c.Get(ctx(t), ep.Name)
	if err != nil || len(after.Finalizers) != 1 || after.Finalizers[0] != "a.example.com/x" {
		t.Fatalf("the other agent's finalizer must stay: %v %v", after.Finalizers, err)
	}
	// A second ack of the same release changes nothing and says so.
	if got, err := ack.RemoveFinalizer(ctx(t), c, after, "b.example.com/y"); err != nil || got != ack.NotHeld {
		t.Fatalf("repeated ack: got %v %v, want NotHeld", got, err)
	}
	// Acknowledging from the stale copy (index 1 is gone) finds the entry again.
	if got, err := ack.RemoveFinalizer(ctx(t), c, releasing, "a.example.com/x"); err != nil || got != ack.Removed {
		t.Fatalf("last ack: got %v %v, want Removed", got, err)
	}
	waitGone(t, c, ep.Name, ep.UID)
	if got, err := ack.RemoveFinalizer(ctx(t), c, releasing, "a.example.com/x"); err != nil || got != ack.Gone {
		t.Fatalf("ack of a gone lease: got %v %v, want Gone", got, err)
	}
}

// The race the protocol exists for: the old holder's lease is gone and a
// successor of the same address, under the same name, holds the same
// finalizer. A late ack aimed at the old holder must leave it alone.
func TestALateAckNeverTouchesTheSuccessorOfTheSameName(t *testing.T) {
	c := kit(t)
	pool := unique("gokit")
	fin := "a.example.com/x"
	old := mustCreate(t, c, lease(pool, "10.1.0.6", "n1", fin))
	if err := c.Delete(ctx(t), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stale, _ := c.Get(ctx(t), old.Name)
	// The old holder is force-released meanwhile (by name, as the controller does).
	if _, err := ack.RemoveFinalizer(ctx(t), c, stale, fin); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, old.Name, old.UID)
	successor := mustCreate(t, c, lease(pool, "10.1.0.6", "n2", fin))
	if successor.Name != old.Name || successor.UID == old.UID {
		t.Fatalf("the successor must have the name and another UID: %s %s", successor.Name, successor.UID)
	}
	got, err := ack.RemoveFinalizer(ctx(t), c, stale, fin)
	if err != nil || got != ack.Replaced {
		t.Fatalf("got %v %v, want Replaced", got, err)
	}
	now, err := c.Get(ctx(t), successor.Name)
	if err != nil || !now.HasFinalizer(fin) {
		t.Fatalf("the successor lost its finalizer: %v %v", now.Finalizers, err)
	}
	// The same late ack by the usual Go route, a merge patch of the whole
	// list (controllerutil.RemoveFinalizer, then Patch or Update by name),
	// lands on the successor and strips its gate. This is why agents use ack.
	if _, err := c.Patch(ctx(t), successor.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)); err != nil {
		t.Fatal(err)
	}
	if now, _ := c.Get(ctx(t), successor.Name); now.HasFinalizer(fin) {
		t.Fatal("a merge patch by name no longer strips a successor's finalizer; revisit the kit's README pitfalls")
	}
}

func TestAddFinalizerAppliesOnlyToTheListAsRead(t *testing.T) {
	c := kit(t)
	pool := unique("gokit")
	ep := mustCreate(t, c, lease(pool, "10.1.0.7", "n1"))
	if ok, err := ack.AddFinalizer(ctx(t), c, ep, "a.example.com/x"); !ok || err != nil {
		t.Fatalf("first add: %v %v", ok, err)
	}
	// ep is now stale: its list was empty. Adding from it must change nothing.
	if ok, err := ack.AddFinalizer(ctx(t), c, ep, "b.example.com/y"); ok || err != nil {
		t.Fatalf("add from a stale read: %v %v, want false", ok, err)
	}
	cur, _ := c.Get(ctx(t), ep.Name)
	if len(cur.Finalizers) != 1 || cur.Finalizers[0] != "a.example.com/x" {
		t.Fatalf("finalizers %v", cur.Finalizers)
	}
	if ok, err := ack.AddFinalizer(ctx(t), c, cur, "b.example.com/y"); !ok || err != nil {
		t.Fatalf("add from a fresh read: %v %v", ok, err)
	}
}

// A per-node agent's ListWatch sees its node's endpoints, never another
// node's and never a hold, and sees a release as MODIFIED, then DELETED.
func TestTheListWatchOfANodeSeesItsEndpointsOnly(t *testing.T) {
	c := kit(t)
	pool := unique("gokit")
	node := unique("node")
	mine := mustCreate(t, c, lease(pool, "10.1.0.10", node))
	mustCreate(t, c, lease(pool, "10.1.0.11", unique("other")))
	hold := lease(pool, "10.1.0.12", node)
	hold.Labels[v1.LabelRole] = v1.RoleHold
	hold.Labels["netendpoint.dev/claim-namespace"] = "default"
	hold.Labels["netendpoint.dev/claim-name"] = "web-0"
	hold.Spec.Role = v1.RoleHoldSpec
	hold.Spec.Claim = &v1.ClaimRef{Namespace: "default", Name: "web-0", UID: "11111111-2222-3333-4444-555555555555"}
	mustCreate(t, c, hold)

	lw := c.ListWatch(v1.NodeSelector(node))
	listed, err := lw.List(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items := listed.(*v1.NetworkEndpointList).Items
	if len(items) != 1 || items[0].UID != mine.UID {
		t.Fatalf("listed %d, want only %s", len(items), mine.Name)
	}
	w, err := lw.Watch(metav1.ListOptions{ResourceVersion: listed.(*v1.NetworkEndpointList).ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := c.Delete(ctx(t), mine.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Bookmark {
				continue
			}
			ep, ok := ev.Object.(*v1.NetworkEndpoint)
			if !ok || ep.UID != mine.UID {
				t.Fatalf("unexpected event %s %T", ev.Type, ev.Object)
			}
			if ev.Type == watch.Deleted {
				return
			}
		case <-timeout:
			t.Fatal("no DELETED event within 20 s")
		}
	}
}
