// Package network gives each sandbox its own network namespace, joined to the
// host by a veth pair, with addresses from a pool of /30 subnets.
//
// For a sandbox id a Pool makes:
//
//   - a network namespace, bind-mounted at <Dir>/netns/<id>, whose loopback is
//     up and whose only other interface is eth0 with the sandbox address
//     (.2 of the /30) and a default route via the host side;
//   - a veth pair: the host side, named from a hash of the pool and the id
//     (see HostIfName), carries the host address (.1 of the /30); its peer is
//     eth0 inside the namespace;
//   - a lease file, <Dir>/leases/<id>, recording the /30.
//
// The host reaches the sandbox at its address over the veth. Without a
// Policy the sandbox reaches nothing: an nftables table of Tupper's own
// drops whatever comes in from a sandbox's veth except replies to what
// the host opened, and forwards nothing to or from one. An Egress policy
// (egress_linux.go) opens the internet under each sandbox's rules: NAT,
// a chain per sandbox, a DNS server and an egress proxy in this process.
// IPv6 is off on both sides of the veth.
//
// A Pool is safe for concurrent use, and several processes may use pools of
// the same subnet at once. The subnet is cut into blocks of /30s (see
// blockSlots), and a /30 is picked under an flock on its block's lock file,
// which is host-wide (Config.LockPath): a /30 counts as taken when any host
// interface carries an address in it or a lease of this pool names it, and
// the lock is held only from the pick until the host side of the veth
// carries the address. Each pool starts in a block of its own, chosen from
// its Dir (homeBlock), and moves on to the next only when that one is full,
// so that daemons with different state roots almost never wait for each
// other's locks.
package network

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// DefaultSubnet is the pool of addresses used when Config.Subnet is unset.
var DefaultSubnet = netip.MustParsePrefix("10.213.0.0/16")

// DefaultIPv6Subnet is a unique local range (RFC 4193) for sandboxes'
// IPv6 addresses, for pools that give sandboxes IPv6 (Config.IPv6Subnet).
var DefaultIPv6Subnet = netip.MustParsePrefix("fd74:7570:7065::/64")

// DefaultIfPrefix starts the names of host-side interfaces when
// Config.IfPrefix is unset.
const DefaultIfPrefix = "tp"

// SandboxIfName is the name of the sandbox's interface inside its namespace.
const SandboxIfName = "eth0"

// Config configures a Pool.
type Config struct {
	// Dir holds the pool's state: netns/<id> bind mounts and leases/<id>
	// files. Required. Two pools must not share one Dir.
	Dir string
	// Subnet is split into /30s, one per sandbox. Empty means
	// DefaultSubnet. IPv4 only, a /8 to /30.
	Subnet netip.Prefix
	// IPv6Subnet, when set, gives each sandbox IPv6 too: the n-th /30 of
	// Subnet pairs with the n-th /126 of IPv6Subnet (host side ::1, the
	// sandbox ::2 of it). Empty means IPv4 only: IPv6 is off inside the
	// sandbox, and an IPv6 connect fails at once. At most a /96.
	IPv6Subnet netip.Prefix
	// LockPath names the files locked while picking a /30: one per block
	// of the subnet, LockPath with ".<block>" added. Every pool on the
	// host that uses the same Subnet must use the same LockPath, since the
	// kernel's addresses are host-wide, not per Dir. Empty means
	// DefaultLockPath(Subnet).
	LockPath string
	// IfPrefix starts every host-side interface name: 1 to 3 characters of
	// [a-z0-9]. Empty means DefaultIfPrefix.
	IfPrefix string
	// Policy, when set, is applied to every endpoint after it is made and
	// removed before it is torn down, and applied again to the endpoints
	// of the leases that New finds (a restarted process). Nil means no
	// egress at all: the sandbox reaches neither the host nor anything
	// beyond it. *Egress is the Policy that gives sandboxes the internet
	// under their own rules.
	Policy Policy
	// Logger receives the pool's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Policy controls what a sandbox may reach beyond the host side of its veth.
// It is the extension point for egress rules (firewall, NAT, DNS); the pool
// itself never forwards traffic.
//
// Apply is called once the endpoint exists, with the pool's lock not held;
// an error fails the Setup, which then calls Remove and tears the endpoint
// down. Remove must be idempotent: Teardown calls it for endpoints that may
// never have had a policy applied, for example after a crash.
type Policy interface {
	Apply(ctx context.Context, ep *Endpoint) error
	Remove(ctx context.Context, ep *Endpoint) error
}

// Endpoint is one sandbox's network: what the backend puts in the sandbox's
// spec and how the host reaches it.
type Endpoint struct {
	// ID is the sandbox id.
	ID string `json:"id"`
	// NetNSPath is the bind-mounted network namespace, for the OCI spec's
	// linux.namespaces entry.
	NetNSPath string `json:"netns"`
	// HostIf is the name of the host side of the veth pair.
	HostIf string `json:"hostIf"`
	// HostAddr is the host side's address with the /30 prefix length.
	HostAddr netip.Prefix `json:"hostAddr"`
	// SandboxAddr is eth0's address inside the namespace, with the /30
	// prefix length. The sandbox's agent is reached at SandboxAddr.Addr().
	SandboxAddr netip.Prefix `json:"sandboxAddr"`
	// HostAddr6 and SandboxAddr6 are the IPv6 addresses of the two sides,
	// with the /126 prefix length, when the pool gives sandboxes IPv6.
	HostAddr6    netip.Prefix `json:"hostAddr6,omitzero"`
	SandboxAddr6 netip.Prefix `json:"sandboxAddr6,omitzero"`
	// Egress is the sandbox's egress policy, for the pool's Policy to
	// enforce; nil allows all egress (when the pool has a Policy at all).
	// It is kept in the lease, so that a restarted process enforces it
	// again.
	Egress *netpolicy.Policy `json:"egress,omitempty"`
}

// PolicyUpdater is a Policy that can change the rules of a sandbox that
// is already set up. Without it, Pool.UpdatePolicy fails with
// errdefs.ErrNotSupported.
type PolicyUpdater interface {
	Update(ctx context.Context, ep *Endpoint) error
}

// DenialReporter is a Policy that remembers what it refused. Without it,
// Pool.Denials reports none.
type DenialReporter interface {
	Denials(id string) []netpolicy.Denial
}

// DefaultLockPath returns the base of the host-wide lock files of pools of
// subnet (see Config.LockPath).
func DefaultLockPath(subnet netip.Prefix) string {
	name := strings.NewReplacer(".", "-", "/", "_").Replace(subnet.Masked().String())
	return filepath.Join("/run/tupper", "netpool-"+name+".lock")
}

var (
	idPattern       = regexp.MustCompile(`^[a-z0-9-]{1,40}$`)
	ifPrefixPattern = regexp.MustCompile(`^[a-z0-9]{1,3}$`)
)

// ValidateID reports an errdefs.ErrInvalidArgument error unless id is a valid
// sandbox id: 1 to 40 characters of [a-z0-9-].
func ValidateID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("sandbox id %q: must be 1 to 40 characters of [a-z0-9-]: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// withDefaults returns c with empty fields set to their defaults.
func (c Config) withDefaults() Config {
	if !c.Subnet.IsValid() {
		c.Subnet = DefaultSubnet
	}
	c.Subnet = c.Subnet.Masked()
	if c.IPv6Subnet.IsValid() {
		c.IPv6Subnet = c.IPv6Subnet.Masked()
	}
	if c.LockPath == "" {
		c.LockPath = DefaultLockPath(c.Subnet)
	}
	if c.IfPrefix == "" {
		c.IfPrefix = DefaultIfPrefix
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports whether c can make a Pool; unset optional fields are
// fine. Its errors are of class errdefs.ErrInvalidArgument.
func (c *Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("Dir is required"))
	} else if !filepath.IsAbs(c.Dir) {
		errs = append(errs, fmt.Errorf("Dir %q must be absolute", c.Dir))
	}
	if c.Subnet.IsValid() {
		if !c.Subnet.Addr().Is4() {
			errs = append(errs, fmt.Errorf("Subnet %s must be IPv4", c.Subnet))
		} else if b := c.Subnet.Bits(); b < 8 || b > 30 {
			errs = append(errs, fmt.Errorf("Subnet %s must be a /8 to /30", c.Subnet))
		}
	}
	if c.IPv6Subnet.IsValid() {
		if !c.IPv6Subnet.Addr().Is6() || c.IPv6Subnet.Addr().Is4In6() {
			errs = append(errs, fmt.Errorf("IPv6Subnet %s must be IPv6", c.IPv6Subnet))
		} else if c.IPv6Subnet.Bits() > 96 {
			errs = append(errs, fmt.Errorf("IPv6Subnet %s must be a /96 or larger", c.IPv6Subnet))
		}
	}
	if c.LockPath != "" && !filepath.IsAbs(c.LockPath) {
		errs = append(errs, fmt.Errorf("LockPath %q must be absolute", c.LockPath))
	}
	if c.IfPrefix != "" && !ifPrefixPattern.MatchString(c.IfPrefix) {
		errs = append(errs, fmt.Errorf("IfPrefix %q must be 1 to 3 characters of [a-z0-9]", c.IfPrefix))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("network config: %w: %w", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

// HostIfName returns the name of the host side of the veth pair of sandbox
// id in the pool kept in dir: prefix and 12 hex digits of a hash of both, at
// most 15 characters as Linux requires. The pool's dir is part of the hash
// so that two pools (a daemon and a test, say) may hold the same id.
func HostIfName(prefix, dir, id string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(dir) + "\x00" + id))
	return prefix + hex.EncodeToString(sum[:6])
}

// ifAlias is the alias set on a host-side interface. It names the pool and
// the id so that List finds interfaces whose lease is lost.
func ifAlias(dir, id string) string {
	return "tupper:" + id + "@" + filepath.Clean(dir)
}

// parseIfAlias returns the id in alias when alias belongs to the pool in dir.
func parseIfAlias(alias, dir string) (string, bool) {
	rest, ok := strings.CutPrefix(alias, "tupper:")
	if !ok {
		return "", false
	}
	id, d, ok := strings.Cut(rest, "@")
	if !ok || d != filepath.Clean(dir) || ValidateID(id) != nil {
		return "", false
	}
	return id, true
}

// slot returns the n-th /30 of subnet as the host and sandbox prefixes, and
// false when subnet has no n-th /30.
func slot(subnet netip.Prefix, n int) (host, sandbox netip.Prefix, ok bool) {
	if n < 0 || n >= slots(subnet) {
		return netip.Prefix{}, netip.Prefix{}, false
	}
	b := subnet.Masked().Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	base += uint32(n) * 4
	addr := func(v uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return netip.PrefixFrom(addr(base+1), 30), netip.PrefixFrom(addr(base+2), 30), true
}

// slot6 returns the IPv6 pair of the n-th /30: the n-th /126 of subnet6.
func slot6(subnet6 netip.Prefix, n int) (host, sandbox netip.Prefix) {
	b := subnet6.Masked().Addr().As16()
	// n < 2^22 (a /8 of /30s) and the subnet is at most a /96: adding
	// 4n to the low 32 bits never carries out of them.
	v := uint32(b[12])<<24 | uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15])
	v += uint32(n) * 4
	at := func(x uint32) netip.Addr {
		c := b
		c[12], c[13], c[14], c[15] = byte(x>>24), byte(x>>16), byte(x>>8), byte(x)
		return netip.AddrFrom16(c)
	}
	return netip.PrefixFrom(at(v+1), 126), netip.PrefixFrom(at(v+2), 126)
}

// slots returns how many /30s subnet holds.
func slots(subnet netip.Prefix) int {
	return 1 << (30 - subnet.Bits())
}

// blockSlots is how many /30s a block of the subnet holds (a /22 of
// addresses): enough for the sandboxes of one busy daemon, few enough that
// the default /16 has 64 blocks to spread daemons over.
const blockSlots = 256

// blocks returns how many blocks subnet is cut into; a subnet of at most
// blockSlots /30s is one block.
func blocks(subnet netip.Prefix) int {
	return max(1, slots(subnet)/blockSlots)
}

// blockRange returns the first /30 of block b of subnet and how many it
// holds.
func blockRange(subnet netip.Prefix, b int) (first, n int) {
	if blocks(subnet) == 1 {
		return 0, slots(subnet)
	}
	return b * blockSlots, blockSlots
}

// homeBlock returns the block a pool kept in dir picks /30s from first.
func homeBlock(subnet netip.Prefix, dir string) int {
	sum := sha256.Sum256([]byte("tupper pool\x00" + filepath.Clean(dir)))
	v := uint32(sum[0])<<24 | uint32(sum[1])<<16 | uint32(sum[2])<<8 | uint32(sum[3])
	return int(v % uint32(blocks(subnet)))
}

// HomeLockPath returns the lock file a pool of c takes first when it picks
// an address: while another process holds it, the pool's Setups wait, and
// pools of other directories (whose home blocks differ) do not.
func (c Config) HomeLockPath() string {
	c = c.withDefaults()
	return blockLockPath(c.LockPath, homeBlock(c.Subnet, c.Dir))
}

// blockLockPath returns the lock file of block b under lockPath.
func blockLockPath(lockPath string, b int) string {
	return fmt.Sprintf("%s.%d", lockPath, b)
}

// slotOf returns the index of the /30 of subnet that holds a, and false when
// subnet does not hold a.
func slotOf(subnet netip.Prefix, a netip.Addr) (int, bool) {
	a = a.Unmap()
	if !a.Is4() || !subnet.Contains(a) {
		return 0, false
	}
	s := subnet.Masked().Addr().As4()
	v := a.As4()
	diff := (uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])) -
		(uint32(s[0])<<24 | uint32(s[1])<<16 | uint32(s[2])<<8 | uint32(s[3]))
	return int(diff / 4), true
}
