// Package ack is how an agent acknowledges a release: it removes its own
// finalizer from the one lease it tore down, and from nothing else.
//
// A lease's name is "<pool>.<ip>", so the next holder of the address gets
// the same name, often with the same finalizers. Only metadata.uid tells
// them apart. Every patch here is a JSON patch that tests /metadata/uid
// first: a patch meant for the old holder fails on its successor (HTTP 422)
// and changes nothing. The removal tests and removes one list entry by
// index, so other agents' finalizers are never rewritten.
//
// Do not remove a finalizer with controllerutil.RemoveFinalizer followed by
// Update or a merge patch: that sends the whole list, tests no UID, and on a
// successor of the same name it strips the successor's finalizers, which is
// the race the protocol exists to prevent.
package ack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "netendpoint.dev/agentkit/api/v1alpha1"
)

// Endpoints is what the acknowledgement needs of a client: a read by name
// and a JSON patch by name. client.Client provides it; wrap a dynamic or a
// controller-runtime client in a few lines (see the README).
type Endpoints interface {
	// Get reads the NetworkEndpoint name; a missing object is an error for
	// which apierrors.IsNotFound is true.
	Get(ctx context.Context, name string) (*v1.NetworkEndpoint, error)
	// PatchJSON applies an RFC 6902 JSON patch to name.
	PatchJSON(ctx context.Context, name string, patch []byte) error
}

// Result is what RemoveFinalizer found.
type Result int

const (
	// Removed: the finalizer is off the object that was torn down.
	Removed Result = iota
	// Gone: the object no longer exists (for example after a forced
	// release); nothing is left to acknowledge.
	Gone
	// Replaced: the name now belongs to a successor. Its finalizers were
	// left alone.
	Replaced
	// NotHeld: the object exists but no longer holds the finalizer.
	NotHeld
)

func (r Result) String() string {
	switch r {
	case Removed:
		return "Removed"
	case Gone:
		return "Gone"
	case Replaced:
		return "Replaced"
	case NotHeld:
		return "NotHeld"
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

// removeAttempts bounds the rereads while the object keeps its UID but its
// finalizers keep moving (other agents acknowledging at the same moment).
const removeAttempts = 5

// ErrNoIdentity is returned for an object without a name or a UID: there is
// nothing a UID-tested patch could be aimed at.
var ErrNoIdentity = errors.New("the NetworkEndpoint has no metadata.name or metadata.uid")

// RemoveFinalizer removes finalizer from obj, the object this agent tore
// down, and from no other object or entry.
//
// Each attempt is one JSON patch: test /metadata/uid, test
// /metadata/finalizers/<i> == finalizer, remove /metadata/finalizers/<i>.
// A 404 means Gone. A failed test (422) or a conflict (409) leads to a
// fresh read, and another attempt with the fresh index only while the name
// still belongs to obj's UID. Any other error is returned, to retry later.
func RemoveFinalizer(ctx context.Context, eps Endpoints, obj *v1.NetworkEndpoint, finalizer string) (Result, error) {
	name, uid := obj.Name, string(obj.UID)
	if name == "" || uid == "" {
		return 0, ErrNoIdentity
	}
	current := obj
	for attempt := 1; ; attempt++ {
		index := indexOf(current.Finalizers, finalizer)
		if index < 0 {
			return NotHeld, nil
		}
		err := eps.PatchJSON(ctx, name, RemovalPatch(uid, index, finalizer))
		switch {
		case err == nil:
			return Removed, nil
		case apierrors.IsNotFound(err):
			return Gone, nil
		case (apierrors.IsInvalid(err) || apierrors.IsConflict(err) || isPatchTestFailure(err)) && attempt < removeAttempts:
		default:
			return 0, fmt.Errorf("removing finalizer %s from %s (uid %s): %w", finalizer, name, uid, err)
		}
		fresh, err := eps.Get(ctx, name)
		switch {
		case apierrors.IsNotFound(err):
			return Gone, nil
		case err != nil:
			return 0, fmt.Errorf("rereading %s: %w", name, err)
		case string(fresh.UID) != uid:
			return Replaced, nil
		}
		current = fresh
	}
}

// AddFinalizer adds finalizer to obj unless obj changed since it was read:
// the patch tests the UID and the whole finalizer list as read, then
// appends. It never lands on a successor and never drops or doubles an
// entry. It returns false, having changed nothing, when a test failed or
// the object is gone; the change that made it fail comes with its own
// watch event. Adding lazily leaves a window before the add in which a
// release is not gated: declare the finalizer in the pool instead where
// you can.
func AddFinalizer(ctx context.Context, eps Endpoints, obj *v1.NetworkEndpoint, finalizer string) (bool, error) {
	if obj.Name == "" || obj.UID == "" {
		return false, ErrNoIdentity
	}
	err := eps.PatchJSON(ctx, obj.Name, AddPatch(string(obj.UID), obj.Finalizers, finalizer))
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err) || isPatchTestFailure(err):
		return false, nil
	}
	return false, fmt.Errorf("adding finalizer %s to %s: %w", finalizer, obj.Name, err)
}

// isPatchTestFailure: the API server answers a failed JSON-patch test with
// 422 Unprocessable Entity (StatusReasonInvalid on current servers; older
// ones used a bare 422).
func isPatchTestFailure(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && status.Status().Code == 422
}

type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

type testOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// RemovalPatch is the JSON patch that removes finalizer at index from the
// object with uid, and fails on any other object or list.
func RemovalPatch(uid string, index int, finalizer string) []byte {
	entry := "/metadata/finalizers/" + strconv.Itoa(index)
	return mustJSON([]any{
		testOp{"test", "/metadata/uid", uid},
		testOp{"test", entry, finalizer},
		op{Op: "remove", Path: entry},
	})
}

// AddPatch is the JSON patch that appends finalizer to the object with uid
// whose finalizer list is still current (a missing list tests as null).
func AddPatch(uid string, current []string, finalizer string) []byte {
	if len(current) == 0 {
		return mustJSON([]any{
			testOp{"test", "/metadata/uid", uid},
			testOp{"test", "/metadata/finalizers", nil},
			op{Op: "add", Path: "/metadata/finalizers", Value: []string{finalizer}},
		})
	}
	return mustJSON([]any{
		testOp{"test", "/metadata/uid", uid},
		testOp{"test", "/metadata/finalizers", current},
		op{Op: "add", Path: "/metadata/finalizers/-", Value: finalizer},
	})
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// mustJSON marshals values that are built here from strings and ints only,
// which cannot fail.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
