// Package names builds and parses the object names of netendpoint leases.
//
// A lease of address ip in pool is named "<pool>.<ip>". IPv4 keeps its
// dotted form ("pods.10.244.0.17"); IPv6 is written fully expanded, with '-'
// between its eight four-digit lower-case groups, so that every address,
// "::" and IPv4-mapped forms included, makes one valid DNS-1123 name. The
// incarnation k of a sticky identity is "<pool>.<ip>-<k>", and its hold is
// named as the lease.
//
// The same name is used by every holder of the address in turn: only
// metadata.uid tells a lease from its successor. The rules are those of the
// Rust crate netendpoint-crd, checked by crd/testdata/vectors.json.
package names

import (
	"fmt"
	"net/netip"
	"strings"
)

// Endpoint is the name of the lease of ip in pool.
func Endpoint(pool string, ip netip.Addr) string {
	return pool + "." + addrPart(ip)
}

// Incarnation is the name of incarnation k of the sticky identity holding
// ip in pool.
func Incarnation(pool string, ip netip.Addr, k uint32) string {
	return fmt.Sprintf("%s-%d", Endpoint(pool, ip), k)
}

// ParseEndpoint returns the address of name when name is the lease name of
// an address in pool. Only the canonical spelling parses, so
// ParseEndpoint(pool, Endpoint(pool, ip)) == ip and nothing else maps to it.
func ParseEndpoint(pool, name string) (netip.Addr, bool) {
	rest, ok := strings.CutPrefix(name, pool+".")
	if !ok || rest == "" {
		return netip.Addr{}, false
	}
	if v4, err := netip.ParseAddr(rest); err == nil && v4.Is4() {
		return v4, v4.String() == rest
	}
	groups := strings.Split(rest, "-")
	if len(groups) != 8 {
		return netip.Addr{}, false
	}
	var b [16]byte
	for i, g := range groups {
		if len(g) != 4 {
			return netip.Addr{}, false
		}
		var v uint16
		for _, c := range []byte(g) {
			switch {
			case c >= '0' && c <= '9':
				v = v<<4 | uint16(c-'0')
			case c >= 'a' && c <= 'f':
				v = v<<4 | uint16(c-'a'+10)
			default:
				return netip.Addr{}, false
			}
		}
		b[2*i], b[2*i+1] = byte(v>>8), byte(v)
	}
	return netip.AddrFrom16(b), true
}

// BlockLabelValue is the netendpoint.dev/block label value of the block
// holding ip: the first address of its aligned IPv4 /26 or IPv6 /122,
// written as in a lease name.
func BlockLabelValue(ip netip.Addr) string {
	if ip.Is4() {
		b := ip.As4()
		b[3] &^= 0x3f
		return netip.AddrFrom4(b).String()
	}
	b := ip.As16()
	b[15] &^= 0x3f
	return expanded(b)
}

func addrPart(ip netip.Addr) string {
	if ip.Is4() {
		return ip.String()
	}
	return expanded(ip.As16())
}

func expanded(b [16]byte) string {
	var sb strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			sb.WriteByte('-')
		}
		fmt.Fprintf(&sb, "%02x%02x", b[i], b[i+1])
	}
	return sb.String()
}
