// Package runc is the runc backend: each sandbox is a Linux container run by
// runc (Debian's), hardened as the best container runtimes harden theirs.
// It is the container tier: sandboxes share the host's kernel, so a kernel
// bug reachable through the syscalls it allows is a way out, where gVisor
// (the default backend) puts a kernel of its own in between. It starts
// faster and runs system calls at native speed.
//
// Each sandbox gets:
//   - a user namespace of its own, mapping its uids and gids 0–65535 onto a
//     range of host ids no other sandbox and no host user holds (see
//     idRange): root inside is an unprivileged stranger outside;
//   - the image through an idmapped mount (so the shared image, owned by
//     host root, shows as owned by the sandbox's root) under an overlay
//     whose upper layer is an ext4 file system of its own, the size of the
//     disk cap, loop-mounted from a sparse file: a write past the cap fails
//     with ENOSPC, and /tmp, part of the root, counts;
//   - pid, ipc, uts, mount, cgroup and network namespaces, the network one
//     from package network with the sandbox's egress policy;
//   - a seccomp filter that refuses the system calls a sandbox has no use
//     for and that have been the way out of containers before (see
//     seccompProfile), no_new_privs, Docker's default capabilities less
//     NET_RAW, Docker's masked and read-only /proc and /sys paths, and the
//     standard device nodes only;
//   - cgroup limits: CPU quota, memory (the kernel's OOM killer ends the
//     largest process inside at the limit), pids, and RLIMIT_NPROC per user
//     so that one user cannot take every task.
//
// Everything the backend makes lives under Config.Root:
//
//	<Root>/sandboxes/<id>/   one bundle per sandbox:
//	    config.json          the OCI spec
//	    lower/               the idmapped mount of the image
//	    disk.img, disk/      the sandbox's writable layer: a sparse ext4 file, loop-mounted
//	    log/console.log      runc's messages and the agent's output, on a small tmpfs
//	    sandbox.json, pid    what Start returned
//	<Root>/runc/             runc's --root: this backend's containers only
//	<Root>/net/              the network pool
//	<RunDir>/<hash of Root>/<id>  the overlay of lower/ and disk/: runc's root
//
// plus a cgroup <CgroupParent>/<id> in each hierarchy and a veth pair.
//
// Importing the package registers it as "runc".
package runc

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

// Defaults for the zero fields of Config, and of a Spec's Resources.
const (
	DefaultCgroupParent = "tupper-runc"
	DefaultCPUs         = 1.0
	DefaultMemoryBytes  = 1 << 30
	DefaultPids         = 1024
	DefaultDiskBytes    = 10 << 30
	// DefaultIfPrefix and DefaultSubnet keep this backend's interfaces
	// and addresses apart from the gVisor backend's when one daemon runs
	// both.
	DefaultIfPrefix = "tr"
	// DefaultRunDir is where sandboxes' roots are mounted.
	DefaultRunDir = "/run/tupper/runc"
	// RuncEnv names the environment variable that points at runc.
	RuncEnv = "TUPPER_RUNC"
)

// DefaultSubnet is the address pool of runc sandboxes when
// Config.Network.Subnet is unset.
var DefaultSubnet = netip.MustParsePrefix("10.214.0.0/16")

// DefaultIPv6Subnet pairs with DefaultSubnet when sandboxes get IPv6.
var DefaultIPv6Subnet = netip.MustParsePrefix("fd74:7570:7072::/64")

// Config configures a Backend.
type Config struct {
	// RuncPath is the runc binary. Empty means $TUPPER_RUNC, then runc on
	// $PATH, then /usr/sbin/runc.
	RuncPath string
	// Root is the directory the backend owns for its state. Required and
	// absolute; two backends must never share one.
	Root string
	// Network configures the sandboxes' address pool; Dir defaults to
	// <Root>/net, Subnet to DefaultSubnet, IfPrefix to DefaultIfPrefix.
	Network network.Config
	// Egress, when set, gives sandboxes internet access under their own
	// policies; nil seals them.
	Egress *network.EgressConfig
	// IPv6 is "off" to keep sandboxes on IPv4; empty means they get IPv6
	// egress when Egress is set and the host has an IPv6 route.
	IPv6 string
	// Logger receives the backend's logs; nil means slog.Default().
	Logger *slog.Logger
	// RunDir holds the mount points of the sandboxes' roots, in a
	// directory per Root; it and its parents are made traversable by
	// every user (see mountRoot). Empty means DefaultRunDir.
	RunDir string
	// CgroupParent is the cgroup under which each sandbox gets
	// <CgroupParent>/<id>. Empty means DefaultCgroupParent.
	CgroupParent string
}

// Validate reports whether c can make a Backend. Its errors are of class
// errdefs.ErrInvalidArgument.
func (c *Config) Validate() error {
	var errs []error
	if c.Root == "" || !filepath.IsAbs(c.Root) {
		errs = append(errs, fmt.Errorf("Root %q must be an absolute path", c.Root))
	}
	if c.RunDir != "" && !filepath.IsAbs(c.RunDir) {
		errs = append(errs, fmt.Errorf("RunDir %q must be absolute", c.RunDir))
	}
	if c.RuncPath != "" && !filepath.IsAbs(c.RuncPath) {
		errs = append(errs, fmt.Errorf("RuncPath %q must be absolute", c.RuncPath))
	}
	if c.CgroupParent != "" && !oci.ValidCgroupParent(c.CgroupParent) {
		errs = append(errs, fmt.Errorf("CgroupParent %q must be a relative cgroup path", c.CgroupParent))
	}
	if filepath.IsAbs(c.Root) {
		n := c.withDefaults().Network
		if err := n.Validate(); err != nil {
			errs = append(errs, err)
		} else if n.Subnet.Bits() < 16 {
			// Each /30 of the subnet is one sandbox's slot of host ids
			// (see idRange); a /16 holds 16,384.
			errs = append(errs, fmt.Errorf("Network.Subnet %s: at most a /16 for this backend", n.Subnet))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runc config: %w: %w", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

// withDefaults returns c with its zero fields filled in.
func (c Config) withDefaults() Config {
	if c.CgroupParent == "" {
		c.CgroupParent = DefaultCgroupParent
	}
	if c.RunDir == "" {
		c.RunDir = DefaultRunDir
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Network.Dir == "" && c.Root != "" {
		c.Network.Dir = filepath.Join(c.Root, "net")
	}
	if !c.Network.Subnet.IsValid() {
		c.Network.Subnet = DefaultSubnet
	}
	if c.Network.IfPrefix == "" {
		c.Network.IfPrefix = DefaultIfPrefix
	}
	if c.Network.Logger == nil {
		c.Network.Logger = c.Logger
	}
	return c
}

// FindRunc returns the runc binary to use when Config.RuncPath is empty:
// $TUPPER_RUNC, then runc on $PATH, then /usr/sbin/runc. It fails with
// errdefs.ErrUnavailable when none exists.
func FindRunc() (string, error) {
	if p := os.Getenv(RuncEnv); p != "" {
		return checkExecutable(p)
	}
	if p, err := exec.LookPath("runc"); err == nil {
		return filepath.Abs(p)
	}
	return checkExecutable("/usr/sbin/runc")
}

func checkExecutable(p string) (string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("runc %s: %w: %w (install it: apt-get install runc)", p, errdefs.ErrUnavailable, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("runc %s: not an executable file: %w", p, errdefs.ErrUnavailable)
	}
	return p, nil
}
