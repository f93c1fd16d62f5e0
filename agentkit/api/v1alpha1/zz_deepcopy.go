package v1alpha1

import "k8s.io/apimachinery/pkg/runtime"

// DeepCopyInto copies every field of in into out, sharing nothing.
func (in *NetworkEndpoint) DeepCopyInto(out *NetworkEndpoint) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	if in.Status != nil {
		out.Status = new(NetworkEndpointStatus)
		in.Status.DeepCopyInto(out.Status)
	}
}

// DeepCopy returns a copy that shares nothing with in.
func (in *NetworkEndpoint) DeepCopy() *NetworkEndpoint {
	if in == nil {
		return nil
	}
	out := new(NetworkEndpoint)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *NetworkEndpoint) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies every item of in into out, sharing nothing.
func (in *NetworkEndpointList) DeepCopyInto(out *NetworkEndpointList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]NetworkEndpoint, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a copy that shares nothing with in.
func (in *NetworkEndpointList) DeepCopy() *NetworkEndpointList {
	if in == nil {
		return nil
	}
	out := new(NetworkEndpointList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *NetworkEndpointList) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies every field of in into out, sharing nothing.
func (in *NetworkEndpointSpec) DeepCopyInto(out *NetworkEndpointSpec) {
	*out = *in
	if in.Pod != nil {
		out.Pod = new(PodRef)
		*out.Pod = *in.Pod
	}
	if in.Static != nil {
		out.Static = new(bool)
		*out.Static = *in.Static
	}
	if in.Claim != nil {
		out.Claim = new(ClaimRef)
		*out.Claim = *in.Claim
	}
	if in.Incarnation != nil {
		out.Incarnation = new(int64)
		*out.Incarnation = *in.Incarnation
	}
	if in.EndpointFinalizers != nil {
		out.EndpointFinalizers = append([]string(nil), in.EndpointFinalizers...)
	}
}

// DeepCopyInto copies every field of in into out, sharing nothing.
func (in *NetworkEndpointStatus) DeepCopyInto(out *NetworkEndpointStatus) {
	*out = *in
	if in.Incarnation != nil {
		out.Incarnation = new(int64)
		*out.Incarnation = *in.Incarnation
	}
	if in.Request != nil {
		out.Request = new(IncarnationRequest)
		in.Request.DeepCopyInto(out.Request)
	}
}

// DeepCopyInto copies every field of in into out, sharing nothing.
func (in *IncarnationRequest) DeepCopyInto(out *IncarnationRequest) {
	*out = *in
	if in.Deadline != nil {
		out.Deadline = in.Deadline.DeepCopy()
	}
}
