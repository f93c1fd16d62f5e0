package main

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	"netendpoint.dev/agentkit/ack"
	v1 "netendpoint.dev/agentkit/api/v1alpha1"
	"netendpoint.dev/agentkit/client"
)

// Agent keeps one rule per leased IP of its node and holds one finalizer:
// a release completes only after its rule is gone.
type Agent struct {
	Client    *client.Client
	Table     *Table
	Finalizer string // "" holds nothing: releases are not gated
	Naive     bool   // tear down by IP alone (a broken agent, for the suite)
	DelayMin  time.Duration
	DelayMax  time.Duration

	mu       sync.Mutex
	tearing  map[string]bool // UIDs whose teardown started
	listed   map[string]string
	informer cache.SharedIndexInformer
}

// Run watches the node's endpoints until ctx ends. ready is closed once the
// first list is applied and the rules of leases gone meanwhile are pruned.
func (a *Agent) Run(ctx context.Context, node string, ready chan<- struct{}) error {
	a.tearing = map[string]bool{}
	a.informer = cache.NewSharedIndexInformer(a.Client.ListWatch(v1.NodeSelector(node)), &v1.NetworkEndpoint{}, 0, cache.Indexers{})
	_, err := a.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { a.observe(ctx, obj.(*v1.NetworkEndpoint)) },
		UpdateFunc: func(oldObj, newObj any) {
			old, cur := oldObj.(*v1.NetworkEndpoint), newObj.(*v1.NetworkEndpoint)
			if old.UID != cur.UID {
				// A relist can show a successor under the old holder's name:
				// the old holder is gone, its rule goes first.
				a.gone(old)
			}
			a.observe(ctx, cur)
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj // deleted while the watch was down
			}
			if ep, ok := obj.(*v1.NetworkEndpoint); ok {
				a.gone(ep)
			}
		},
	})
	if err != nil {
		return err
	}
	go a.informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.informer.HasSynced) {
		return ctx.Err()
	}
	a.prune()
	close(ready)
	<-ctx.Done()
	return nil
}

// prune removes the rules of leases that vanished while the agent was down.
func (a *Agent) prune() {
	live := map[string]bool{}
	for _, obj := range a.informer.GetStore().List() {
		live[string(obj.(*v1.NetworkEndpoint).UID)] = true
	}
	for _, r := range a.Table.Rules() {
		if !live[r.UID] {
			a.remove(r.IP, r.UID, "", "vanished while the agent was down")
		}
	}
}

func (a *Agent) observe(ctx context.Context, ep *v1.NetworkEndpoint) {
	if ep.IsHold() {
		return
	}
	if ep.IsReleasing() {
		a.startTeardown(ctx, ep.DeepCopy())
		return
	}
	if installed, err := a.Table.Install(ep.Spec.IP, string(ep.UID), ep.Name); err != nil {
		slog.Error("install failed", "endpoint", ep.Name, "err", err)
	} else if installed {
		slog.Info("rule installed", "endpoint", ep.Name, "ip", ep.Spec.IP, "uid", ep.UID)
	}
}

// gone: the object no longer exists (all finalizers removed, perhaps by a
// forced release); its rule goes unless a teardown already runs for it.
func (a *Agent) gone(ep *v1.NetworkEndpoint) {
	a.mu.Lock()
	started := a.tearing[string(ep.UID)]
	a.mu.Unlock()
	if !started {
		a.remove(ep.Spec.IP, string(ep.UID), ep.Name, "deleted")
	}
}

func (a *Agent) startTeardown(ctx context.Context, ep *v1.NetworkEndpoint) {
	a.mu.Lock()
	if a.tearing[string(ep.UID)] {
		a.mu.Unlock()
		return
	}
	a.tearing[string(ep.UID)] = true
	a.mu.Unlock()
	go func() {
		delay := a.DelayMin
		if a.DelayMax > a.DelayMin {
			delay += rand.N(a.DelayMax - a.DelayMin)
		}
		time.Sleep(delay) // a slow dataplane
		a.remove(ep.Spec.IP, string(ep.UID), ep.Name, "released")
		if a.Finalizer == "" {
			return
		}
		// Tear down, then acknowledge: only now may the address change hands.
		for backoff := 200 * time.Millisecond; ctx.Err() == nil; backoff = min(2*backoff, 10*time.Second) {
			res, err := ack.RemoveFinalizer(ctx, a.Client, ep, a.Finalizer)
			if err == nil {
				slog.Info("release acknowledged", "endpoint", ep.Name, "uid", ep.UID, "result", res.String())
				return
			}
			slog.Warn("acknowledgement failed; retrying", "endpoint", ep.Name, "err", err, "in", backoff)
			time.Sleep(backoff)
		}
	}()
}

func (a *Agent) remove(ip, uid, name, why string) {
	if removed, err := a.Table.Remove(ip, uid, name, a.Naive); err != nil {
		slog.Error("teardown failed", "ip", ip, "uid", uid, "err", err)
	} else if removed {
		slog.Info("rule removed", "ip", ip, "uid", uid, "why", why)
	}
}
