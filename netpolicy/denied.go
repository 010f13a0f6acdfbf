package netpolicy

import (
	"net/netip"
	"time"
)

// alwaysDenied are the destinations no sandbox policy can open: only the
// operator can (see AlwaysDenied).
var alwaysDenied = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("10.0.0.0/8"),     // private
	netip.MustParsePrefix("100.64.0.0/10"),  // shared address space (CGNAT)
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, cloud metadata
	netip.MustParsePrefix("172.16.0.0/12"),  // private
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("192.168.0.0/16"), // private
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("224.0.0.0/4"),    // multicast
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, broadcast
	netip.MustParsePrefix("::/128"),         // unspecified
	netip.MustParsePrefix("::1/128"),        // loopback
	netip.MustParsePrefix("::ffff:0:0/96"),  // IPv4-mapped
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("100::/64"),       // discard
	netip.MustParsePrefix("fc00::/7"),       // unique local, fd00:ec2::254 among them
	netip.MustParsePrefix("fe80::/10"),      // link-local
	netip.MustParsePrefix("ff00::/8"),       // multicast
}

// AlwaysDenied returns the ranges a sandbox never reaches, whatever its
// policy: private and shared ranges, loopback, link-local and metadata
// addresses, multicast and reserved space. The host's own addresses and
// the networks it is directly attached to are added by the network layer,
// which knows them. The slice is a copy.
func AlwaysDenied() []netip.Prefix {
	return append([]netip.Prefix(nil), alwaysDenied...)
}

// Denial is one connection or lookup that a sandbox's policy refused.
type Denial struct {
	Time time.Time `json:"time"`
	// Kind is "connect" (a TCP or UDP flow), "http", "tls" or "dns".
	Kind string `json:"kind"`
	// Protocol is "tcp" or "udp"; empty for lookups.
	Protocol string `json:"protocol,omitempty"`
	// Destination is "ip:port", or the name looked up.
	Destination string `json:"destination"`
	// Host is the HTTP Host or TLS SNI the connection named, if any.
	Host string `json:"host,omitempty"`
	// Rule names what denied it.
	Rule string `json:"rule"`
}
