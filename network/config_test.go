package network

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/lightbearco/tupper/errdefs"
)

func TestSlot(t *testing.T) {
	subnet := netip.MustParsePrefix("10.213.0.0/16")
	tests := []struct {
		name          string
		n             int
		host, sandbox string
		ok            bool
	}{
		{name: "first", n: 0, host: "10.213.0.1/30", sandbox: "10.213.0.2/30", ok: true},
		{name: "second", n: 1, host: "10.213.0.5/30", sandbox: "10.213.0.6/30", ok: true},
		{name: "crosses octet", n: 64, host: "10.213.1.1/30", sandbox: "10.213.1.2/30", ok: true},
		{name: "last", n: 16383, host: "10.213.255.253/30", sandbox: "10.213.255.254/30", ok: true},
		{name: "past end", n: 16384},
		{name: "negative", n: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, sandbox, ok := slot(subnet, tt.n)
			if ok != tt.ok {
				t.Fatalf("slot(%d) ok = %v, want %v", tt.n, ok, tt.ok)
			}
			if !ok {
				return
			}
			if host.String() != tt.host || sandbox.String() != tt.sandbox {
				t.Errorf("slot(%d) = %s, %s; want %s, %s", tt.n, host, sandbox, tt.host, tt.sandbox)
			}
			for _, a := range []netip.Prefix{host, sandbox} {
				if n, ok := slotOf(subnet, a.Addr()); !ok || n != tt.n {
					t.Errorf("slotOf(%s) = %d, %v; want %d", a.Addr(), n, ok, tt.n)
				}
			}
		})
	}
	if _, ok := slotOf(subnet, netip.MustParseAddr("10.214.0.1")); ok {
		t.Error("slotOf an address outside the subnet reported ok")
	}
	if got := slots(netip.MustParsePrefix("10.0.0.0/30")); got != 1 {
		t.Errorf("slots(/30) = %d, want 1", got)
	}
}

func TestHostIfName(t *testing.T) {
	a := HostIfName("tp", "/var/lib/tupper/net", "sandbox-1")
	if len(a) > 15 {
		t.Errorf("HostIfName = %q, longer than 15", a)
	}
	if b := HostIfName("tp", "/var/lib/tupper/net/", "sandbox-1"); a != b {
		t.Errorf("HostIfName not stable under a trailing slash: %q vs %q", a, b)
	}
	if b := HostIfName("tp", "/other", "sandbox-1"); a == b {
		t.Errorf("two pools got the same name %q for one id", a)
	}
	if b := HostIfName("abc", "/x", "a"); len(b) > 15 {
		t.Errorf("HostIfName with the longest prefix = %q, longer than 15", b)
	}
}

func TestIfAlias(t *testing.T) {
	alias := ifAlias("/var/lib/tupper/net", "abc-1")
	if id, ok := parseIfAlias(alias, "/var/lib/tupper/net/"); !ok || id != "abc-1" {
		t.Errorf("parseIfAlias(%q) = %q, %v", alias, id, ok)
	}
	for _, other := range []string{"/var/lib/tupper", "/other"} {
		if _, ok := parseIfAlias(alias, other); ok {
			t.Errorf("parseIfAlias matched the pool in %s", other)
		}
	}
	if _, ok := parseIfAlias("docker0", "/x"); ok {
		t.Error("parseIfAlias matched a foreign alias")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{name: "minimal", cfg: Config{Dir: "/run/x"}, ok: true},
		{name: "full", cfg: Config{Dir: "/run/x", Subnet: netip.MustParsePrefix("10.9.0.0/24"), LockPath: "/run/l", IfPrefix: "sb"}, ok: true},
		{name: "no dir", cfg: Config{}},
		{name: "relative dir", cfg: Config{Dir: "x"}},
		{name: "ipv6 subnet", cfg: Config{Dir: "/x", Subnet: netip.MustParsePrefix("fd00::/64")}},
		{name: "subnet too small", cfg: Config{Dir: "/x", Subnet: netip.MustParsePrefix("10.0.0.0/31")}},
		{name: "relative lock", cfg: Config{Dir: "/x", LockPath: "lock"}},
		{name: "long prefix", cfg: Config{Dir: "/x", IfPrefix: "tupper"}},
		{name: "bad prefix", cfg: Config{Dir: "/x", IfPrefix: "T-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Validate() = %v, not ErrInvalidArgument", err)
			}
		})
	}
}

func TestValidateID(t *testing.T) {
	for _, id := range []string{"a", "abc-123", "0123456789012345678901234567890123456789"} {
		if err := ValidateID(id); err != nil {
			t.Errorf("ValidateID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", "A", "a/b", "..", "a.b", "01234567890123456789012345678901234567890"} {
		if err := ValidateID(id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ValidateID(%q) = %v, want ErrInvalidArgument", id, err)
		}
	}
}

func TestDefaultLockPath(t *testing.T) {
	if got, want := DefaultLockPath(netip.MustParsePrefix("10.213.7.0/16")), "/run/tupper/netpool-10-213-0-0_16.lock"; got != want {
		t.Errorf("DefaultLockPath = %q, want %q", got, want)
	}
}

func TestBlocks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		subnet string
		blocks int
		last   [2]int // first and count of the last block
	}{
		{name: "default /16", subnet: "10.213.0.0/16", blocks: 64, last: [2]int{63 * 256, 256}},
		{name: "a /22 is one block", subnet: "10.9.0.0/22", blocks: 1, last: [2]int{0, 256}},
		{name: "a /24 is one small block", subnet: "10.9.0.0/24", blocks: 1, last: [2]int{0, 64}},
		{name: "a /20", subnet: "10.9.0.0/20", blocks: 4, last: [2]int{768, 256}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			subnet := netip.MustParsePrefix(tc.subnet)
			if got := blocks(subnet); got != tc.blocks {
				t.Errorf("blocks = %d, want %d", got, tc.blocks)
			}
			if first, n := blockRange(subnet, tc.blocks-1); [2]int{first, n} != tc.last {
				t.Errorf("last block = %d+%d, want %v", first, n, tc.last)
			}
			seen := map[int]bool{}
			for i := range 200 {
				h := homeBlock(subnet, fmt.Sprintf("/var/lib/tupper-%d/backends/gvisor/network", i))
				if h < 0 || h >= tc.blocks {
					t.Fatalf("homeBlock = %d, outside [0, %d)", h, tc.blocks)
				}
				seen[h] = true
			}
			if tc.blocks > 1 && len(seen) < tc.blocks/2 {
				t.Errorf("200 roots share only %d of %d home blocks", len(seen), tc.blocks)
			}
			if homeBlock(subnet, "/a/b/") != homeBlock(subnet, "/a/b") {
				t.Error("homeBlock depends on how the directory is spelled")
			}
		})
	}
}
