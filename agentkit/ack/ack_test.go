package ack

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	v1 "netendpoint.dev/agentkit/api/v1alpha1"
)

func decode(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTheRemovalPatchTestsTheUIDBeforeTheEntry(t *testing.T) {
	got := decode(t, RemovalPatch("u1", 1, "a.example/x"))
	want := decode(t, []byte(`[
		{"op":"test","path":"/metadata/uid","value":"u1"},
		{"op":"test","path":"/metadata/finalizers/1","value":"a.example/x"},
		{"op":"remove","path":"/metadata/finalizers/1"}]`))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestTheAddPatchTestsTheUIDAndTheListAsRead(t *testing.T) {
	got := decode(t, AddPatch("u1", nil, "a.example/x"))
	want := decode(t, []byte(`[
		{"op":"test","path":"/metadata/uid","value":"u1"},
		{"op":"test","path":"/metadata/finalizers","value":null},
		{"op":"add","path":"/metadata/finalizers","value":["a.example/x"]}]`))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("empty list: got %v\nwant %v", got, want)
	}
	got = decode(t, AddPatch("u1", []string{"b.example/y"}, "a.example/x"))
	want = decode(t, []byte(`[
		{"op":"test","path":"/metadata/uid","value":"u1"},
		{"op":"test","path":"/metadata/finalizers","value":["b.example/y"]},
		{"op":"add","path":"/metadata/finalizers/-","value":"a.example/x"}]`))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("one entry: got %v\nwant %v", got, want)
	}
}

// script answers PatchJSON and Get from queues, in order, and records calls.
type script struct {
	patches []error
	gets    []*v1.NetworkEndpoint
	getErrs []error
	calls   []string
}

func (s *script) PatchJSON(_ context.Context, name string, patch []byte) error {
	s.calls = append(s.calls, "patch "+name+" "+string(patch))
	err := s.patches[0]
	s.patches = s.patches[1:]
	return err
}

func (s *script) Get(_ context.Context, name string) (*v1.NetworkEndpoint, error) {
	s.calls = append(s.calls, "get "+name)
	ep, err := s.gets[0], s.getErrs[0]
	s.gets, s.getErrs = s.gets[1:], s.getErrs[1:]
	return ep, err
}

func lease(uid string, finalizers ...string) *v1.NetworkEndpoint {
	return &v1.NetworkEndpoint{ObjectMeta: metav1.ObjectMeta{Name: "pods.10.0.0.5", UID: types.UID(uid), Finalizers: finalizers}}
}

var gr = schema.GroupResource{Group: v1.Group, Resource: v1.Resource}

func testFailed() error {
	return apierrors.NewInvalid(schema.GroupKind{Group: v1.Group, Kind: v1.Kind}, "pods.10.0.0.5", nil)
}

func TestARemovalNeverPatchesASuccessor(t *testing.T) {
	s := &script{
		patches: []error{testFailed()},
		gets:    []*v1.NetworkEndpoint{lease("new", "a.example/x")},
		getErrs: []error{nil},
	}
	got, err := RemoveFinalizer(context.Background(), s, lease("old", "a.example/x"), "a.example/x")
	if err != nil || got != Replaced {
		t.Fatalf("got %v %v, want Replaced", got, err)
	}
	if len(s.calls) != 2 {
		t.Fatalf("one patch and one read, then nothing: %v", s.calls)
	}
}

func TestARemovalRetriesWithTheFreshIndexOfTheSameObject(t *testing.T) {
	s := &script{
		patches: []error{testFailed(), nil},
		gets:    []*v1.NetworkEndpoint{lease("old", "a.example/x")},
		getErrs: []error{nil},
	}
	got, err := RemoveFinalizer(context.Background(), s, lease("old", "b.example/y", "a.example/x"), "a.example/x")
	if err != nil || got != Removed {
		t.Fatalf("got %v %v, want Removed", got, err)
	}
	want := "patch pods.10.0.0.5 " + string(RemovalPatch("old", 0, "a.example/x"))
	if s.calls[2] != want {
		t.Fatalf("second patch %q, want %q", s.calls[2], want)
	}
}

func TestGoneNotHeldAndOtherErrors(t *testing.T) {
	s := &script{patches: []error{apierrors.NewNotFound(gr, "pods.10.0.0.5")}}
	if got, err := RemoveFinalizer(context.Background(), s, lease("old", "a.example/x"), "a.example/x"); err != nil || got != Gone {
		t.Fatalf("404: got %v %v, want Gone", got, err)
	}
	if got, err := RemoveFinalizer(context.Background(), &script{}, lease("old", "b.example/y"), "a.example/x"); err != nil || got != NotHeld {
		t.Fatalf("not held: got %v %v", got, err)
	}
	s = &script{patches: []error{apierrors.NewServiceUnavailable("down")}}
	if _, err := RemoveFinalizer(context.Background(), s, lease("old", "a.example/x"), "a.example/x"); err == nil {
		t.Fatal("an unavailable API server is an error to retry, never success")
	}
	if _, err := RemoveFinalizer(context.Background(), &script{}, lease("", "a.example/x"), "a.example/x"); err != ErrNoIdentity {
		t.Fatalf("no UID: %v", err)
	}
}

func TestAttemptsAreBoundedWhileTheListKeepsMoving(t *testing.T) {
	s := &script{}
	for i := 0; i < removeAttempts; i++ {
		s.patches = append(s.patches, testFailed())
		s.gets = append(s.gets, lease("old", "a.example/x"))
		s.getErrs = append(s.getErrs, nil)
	}
	if _, err := RemoveFinalizer(context.Background(), s, lease("old", "a.example/x"), "a.example/x"); err == nil {
		t.Fatal("a removal that never applies ends in an error")
	}
	if n := len(s.calls); n != 2*removeAttempts-1 {
		t.Fatalf("%d calls, want %d", n, 2*removeAttempts-1)
	}
}
