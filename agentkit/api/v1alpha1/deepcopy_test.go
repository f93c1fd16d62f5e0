package v1alpha1

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func full() *NetworkEndpoint {
	static, inc := true, int64(3)
	deadline := metav1.NewTime(time.Unix(1_700_000_000, 0))
	return &NetworkEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "pods.10.0.0.5", Labels: map[string]string{LabelPool: "pods"}, Finalizers: []string{"a.example/x"}},
		Spec: NetworkEndpointSpec{
			Pool: "pods", IP: "10.0.0.5", PrefixLength: 24, IfName: "eth0", ContainerID: "c1", Node: "n1",
			Pod: &PodRef{Namespace: "ns", Name: "p", UID: "u"}, Static: &static,
			Claim: &ClaimRef{Namespace: "ns", Name: "c", UID: "cu"}, Incarnation: &inc,
			EndpointFinalizers: []string{"a.example/x"},
		},
		Status: &NetworkEndpointStatus{Incarnation: &inc, Request: &IncarnationRequest{Incarnation: 4, Deadline: &deadline}},
	}
}

func TestADeepCopySharesNothing(t *testing.T) {
	in := full()
	out := in.DeepCopy()
	if !reflect.DeepEqual(in, out) {
		t.Fatal("the copy differs")
	}
	out.Labels[LabelPool] = "x"
	out.Finalizers[0] = "x"
	out.Spec.Pod.Name = "x"
	*out.Spec.Static = false
	out.Spec.Claim.UID = "x"
	*out.Spec.Incarnation = 9
	out.Spec.EndpointFinalizers[0] = "x"
	*out.Status.Incarnation = 9
	out.Status.Request.Deadline.Time = time.Unix(0, 0)
	if !reflect.DeepEqual(in, full()) {
		t.Fatalf("changing the copy changed the original: %+v", in)
	}
	list := &NetworkEndpointList{Items: []NetworkEndpoint{*full()}}
	lc := list.DeepCopyObject().(*NetworkEndpointList)
	lc.Items[0].Spec.Pod.Name = "x"
	if list.Items[0].Spec.Pod.Name != "p" {
		t.Fatal("changing a list copy changed the original")
	}
}
