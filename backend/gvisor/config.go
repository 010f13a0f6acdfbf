// Package gvisor is the gVisor backend: each sandbox is a runsc sandbox on
// the systrap platform, with the agent as its first process, a copy-on-write
// view of the shared image, its own network namespace from package network,
// and cgroup limits.
//
// Everything the backend makes lives under Config.Root:
//
//	<Root>/runsc/            runsc's --root: the state of this backend's containers only
//	<Root>/sandboxes/<id>/   one bundle per sandbox:
//	    config.json          the OCI spec
//	    rootfs/, ovl/        the host overlay of the image that runsc takes as root
//	    upper/               where runsc's overlay puts its (unlinked) filestore:
//	                         every file the sandbox writes, /tmp included
//	    log/console.log      runsc's messages and the agent's stdout and stderr,
//	                         on a small tmpfs of its own (see oci.LogDir)
//	    sandbox.json, pid    what Start returned, for diagnostics and Stats
//	<Root>/net/              the network pool (netns bind mounts, leases)
//
// plus a cgroup <CgroupParent>/<id> in each hierarchy, a veth pair per
// sandbox, and runsc's host-wide --shared-root (Config.SharedRoot). A
// bundle directory is the mark of a sandbox this backend owns: Start makes
// it first and Stop removes it last.
//
// Limits (docs/design/limits.md): CPU is the cgroup's quota, set by runsc
// from the OCI spec on cgroup v1 or v2. Memory is held inside: gVisor
// shows the limit as MemTotal and the agent's out-of-memory killer ends
// the largest process at it; the host cgroup sits a headroom above, as a
// backstop that ends the whole sandbox (see hostMemory). Pids is enforced
// inside, so that a fork bomb gets EAGAIN rather than killing the
// sandbox; the host cgroup's pids limit sits above it as a backstop (see
// hostTasksPerTask), and a Start is refused when the host limits of all
// sandboxes would pass what the host spares (see pidBudget). Open files
// are RLIMIT_NOFILE, 1024 soft and 65536 hard. Disk is the
// size of runsc's overlay (see overlayFlag): a write past it fails with
// ENOSPC inside the sandbox, which lives on.
//
// Importing the package registers it as "gvisor" (see register.go).
package gvisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

// Defaults for the zero fields of Config.
const (
	DefaultPlatform     = "systrap"
	DefaultCgroupParent = "tupper"
	DefaultCPUs         = 1.0
	DefaultMemoryBytes  = 1 << 30
	DefaultPids         = 1024
	DefaultDiskBytes    = 10 << 30
	DefaultSharedRoot   = "/run/tupper/runsc-shared"
	// DefaultOvercommit lets the sandboxes' limits add up to 32 times
	// what the host spares them: an idle sandbox uses about 19 MiB and 28
	// host tasks of its 1 GiB and 5,632 (measured), and the parent
	// cgroup holds the host's reserve whatever they do.
	DefaultOvercommit = 32
	// FallbackRunscPath is where runsc is looked for last.
	FallbackRunscPath = "/usr/local/bin/runsc"
	// RunscEnv names the environment variable that points at runsc.
	RunscEnv = "TUPPER_RUNSC"
)

// Config configures a Backend.
type Config struct {
	// RunscPath is the runsc binary. Empty means $TUPPER_RUNSC, then runsc
	// on $PATH, then /usr/local/bin/runsc.
	RunscPath string
	// Root is the directory the backend owns for its state. Required and
	// absolute; two backends must never share one.
	Root string
	// Platform is runsc's platform: systrap (the default), ptrace or kvm.
	Platform string
	// Network configures the sandboxes' address pool. Its Dir defaults to
	// <Root>/net and its Logger to Logger. Its Policy is set by New when
	// Egress is.
	Network network.Config
	// Egress, when set, gives sandboxes internet access under their own
	// policies (network.Egress); nil seals them. Its Dir defaults to
	// <Network.Dir>/egress.
	Egress *network.EgressConfig
	// IPv6 gives sandboxes IPv6 egress, from Network.IPv6Subnet (default
	// network.DefaultIPv6Subnet), when Egress is set and the host has an
	// IPv6 default route of its own; "off" keeps them on IPv4. Empty
	// means "auto".
	IPv6 string
	// Logger receives the backend's logs; nil means slog.Default().
	Logger *slog.Logger
	// SharedRoot is runsc's --shared-root: host-wide state that all
	// sandboxes may share, today only the bind mount of the empty network
	// namespace that every gofer joins. It sits outside Root so that Root
	// holds no mount once its sandboxes are gone. Empty means
	// DefaultSharedRoot.
	SharedRoot string
	// Debug turns on runsc's debug logs, written under <Root>/debug/.
	Debug bool
	// RunscFlags are extra global runsc flags, such as "--host-settings=ignore".
	RunscFlags []string
	// CgroupParent is the cgroup, relative to each hierarchy's root, under
	// which each sandbox gets <CgroupParent>/<id>. Empty means "tupper".
	CgroupParent string
	// DefaultCPUs, DefaultMemoryBytes, DefaultPids and DefaultDiskBytes
	// replace the zero fields of a Spec's Resources. Zero means 1 CPU,
	// 1 GiB, 1024 and 10 GiB.
	DefaultCPUs        float64
	DefaultMemoryBytes int64
	DefaultPids        int64
	DefaultDiskBytes   int64
	// HostPids is how many host tasks all the sandboxes under
	// CgroupParent may hold together (the parent cgroup's pids.max). Zero
	// means all the host spares: the smaller of kernel.pid_max and
	// kernel.threads-max less ReserveTasks. It may not be above that.
	HostPids int64
	// HostMemory is how much memory all the sandboxes under CgroupParent
	// may use together (the parent cgroup's memory limit). Zero means
	// the host's memory less ReserveMemory. It may not be above that.
	HostMemory int64
	// ReserveTasks and ReserveMemory are what the host keeps for itself,
	// its services and the daemon: zero means a quarter of the host's
	// task capacity (at least 4096), and 1 GiB or 1/16 of its memory,
	// whichever is more.
	ReserveTasks  int64
	ReserveMemory int64
	// Overcommit bounds how far the sandboxes' own limits, added up, may
	// exceed what the host spares them (HostPids and HostMemory): a
	// Start is refused past Overcommit times either. Limits are not
	// reservations; admission counts what sandboxes use (see
	// hostlimits_linux.go). Zero means DefaultOvercommit.
	Overcommit float64
}

var (
	platforms = map[string]bool{"systrap": true, "ptrace": true, "kvm": true}
)

// Validate reports whether c can make a Backend; zero optional fields are
// fine. Its errors are of class errdefs.ErrInvalidArgument. It does not look
// for runsc; New does.
func (c *Config) Validate() error {
	var errs []error
	if c.Root == "" {
		errs = append(errs, errors.New("Root is required"))
	} else if !filepath.IsAbs(c.Root) {
		errs = append(errs, fmt.Errorf("Root %q must be absolute", c.Root))
	}
	if c.Platform != "" && !platforms[c.Platform] {
		errs = append(errs, fmt.Errorf("Platform %q: want systrap, ptrace or kvm", c.Platform))
	}
	if c.SharedRoot != "" && !filepath.IsAbs(c.SharedRoot) {
		errs = append(errs, fmt.Errorf("SharedRoot %q must be absolute", c.SharedRoot))
	}
	if c.RunscPath != "" && !filepath.IsAbs(c.RunscPath) {
		errs = append(errs, fmt.Errorf("RunscPath %q must be absolute", c.RunscPath))
	}
	if c.CgroupParent != "" && !oci.ValidCgroupParent(c.CgroupParent) {
		errs = append(errs, fmt.Errorf("CgroupParent %q must be a relative cgroup path", c.CgroupParent))
	}
	if c.DefaultCPUs < 0 || c.DefaultMemoryBytes < 0 || c.DefaultPids < 0 || c.DefaultDiskBytes < 0 || c.HostPids < 0 ||
		c.HostMemory < 0 || c.ReserveTasks < 0 || c.ReserveMemory < 0 || c.Overcommit < 0 {
		errs = append(errs, errors.New("default resources must not be negative"))
	}
	if c.Network.Dir != "" || filepath.IsAbs(c.Root) {
		n := c.withDefaults().Network
		if err := n.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gvisor config: %w: %w", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

// withDefaults returns c with its zero fields filled in. It does not look
// for runsc.
func (c Config) withDefaults() Config {
	if c.Platform == "" {
		c.Platform = DefaultPlatform
	}
	if c.SharedRoot == "" {
		c.SharedRoot = DefaultSharedRoot
	}
	if c.CgroupParent == "" {
		c.CgroupParent = DefaultCgroupParent
	}
	if c.DefaultCPUs == 0 {
		c.DefaultCPUs = DefaultCPUs
	}
	if c.DefaultMemoryBytes == 0 {
		c.DefaultMemoryBytes = DefaultMemoryBytes
	}
	if c.DefaultPids == 0 {
		c.DefaultPids = DefaultPids
	}
	if c.DefaultDiskBytes == 0 {
		c.DefaultDiskBytes = DefaultDiskBytes
	}
	if c.Overcommit == 0 {
		c.Overcommit = DefaultOvercommit
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Network.Dir == "" && c.Root != "" {
		c.Network.Dir = filepath.Join(c.Root, "net")
	}
	if c.Network.Logger == nil {
		c.Network.Logger = c.Logger
	}
	return c
}

// FindRunsc returns the runsc binary to use when Config.RunscPath is empty:
// $TUPPER_RUNSC, then runsc on $PATH, then /usr/local/bin/runsc. It fails
// with errdefs.ErrUnavailable when none exists.
func FindRunsc() (string, error) {
	if p := os.Getenv(RunscEnv); p != "" {
		return checkExecutable(p)
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		return filepath.Abs(p)
	}
	return checkExecutable(FallbackRunscPath)
}

func checkExecutable(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("runsc %s: %w: %w", path, errdefs.ErrUnavailable, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("runsc %s: not an executable file: %w", path, errdefs.ErrUnavailable)
	}
	return path, nil
}
