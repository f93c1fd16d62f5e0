package names

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	v1 "netendpoint.dev/agentkit/api/v1alpha1"
)

// vectors is crd/testdata/vectors.json, which the Rust crate asserts too.
type vectors struct {
	Constants map[string]string `json:"constants"`
	Names     []struct {
		Pool, IP, Name, Block string
	} `json:"names"`
	Incarnations []struct {
		Pool, IP, Name string
		Incarnation    uint32
	} `json:"incarnations"`
	NotLeaseNames []struct {
		Pool, Name, Why string
	} `json:"notLeaseNames"`
}

func load(t *testing.T) vectors {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "crd", "testdata", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestConstantsAreThoseOfTheRustCrate(t *testing.T) {
	v := load(t)
	want := map[string]string{
		"group": v1.Group, "version": v1.Version, "kind": v1.Kind, "plural": v1.Resource,
		"labelPool": v1.LabelPool, "labelNode": v1.LabelNode, "labelPodNamespace": v1.LabelPodNamespace,
		"labelPodName": v1.LabelPodName, "labelPodUID": v1.LabelPodUID, "labelRole": v1.LabelRole,
		"roleHold": v1.RoleHold, "endpointsOnly": v1.EndpointsOnly, "labelNetwork": v1.LabelNetwork,
		"labelIPFamily": v1.LabelIPFamily, "labelBlock": v1.LabelBlock, "fieldNode": v1.FieldNode,
		"fieldContainerID": v1.FieldContainerID, "finalizerStickyHold": v1.FinalizerStickyHold,
	}
	if len(v.Constants) != len(want) {
		t.Fatalf("the vectors list %d constants, this test checks %d", len(v.Constants), len(want))
	}
	for key, got := range want {
		if v.Constants[key] != got {
			t.Errorf("%s: Go has %q, the vectors %q", key, got, v.Constants[key])
		}
	}
}

func TestLeaseNamesAndBlocksMatchTheVectorsBothWays(t *testing.T) {
	v := load(t)
	if len(v.Names) < 10 {
		t.Fatalf("only %d name vectors", len(v.Names))
	}
	for _, c := range v.Names {
		ip := netip.MustParseAddr(c.IP)
		if got := Endpoint(c.Pool, ip); got != c.Name {
			t.Errorf("Endpoint(%s, %s) = %s, want %s", c.Pool, c.IP, got, c.Name)
		}
		back, ok := ParseEndpoint(c.Pool, c.Name)
		if !ok || back != ip {
			t.Errorf("ParseEndpoint(%s, %s) = %v %v, want %s", c.Pool, c.Name, back, ok, ip)
		}
		if got := BlockLabelValue(ip); got != c.Block {
			t.Errorf("BlockLabelValue(%s) = %s, want %s", c.IP, got, c.Block)
		}
	}
}

func TestIncarnationNamesMatchTheVectors(t *testing.T) {
	for _, c := range load(t).Incarnations {
		if got := Incarnation(c.Pool, netip.MustParseAddr(c.IP), c.Incarnation); got != c.Name {
			t.Errorf("Incarnation(%s, %s, %d) = %s, want %s", c.Pool, c.IP, c.Incarnation, got, c.Name)
		}
	}
}

func TestNamesThatAreNoLeaseOfThePoolDoNotParse(t *testing.T) {
	for _, c := range load(t).NotLeaseNames {
		if ip, ok := ParseEndpoint(c.Pool, c.Name); ok {
			t.Errorf("%s parsed as %s in pool %s (%s)", c.Name, ip, c.Pool, c.Why)
		}
	}
}
