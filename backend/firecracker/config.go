// Package firecracker is the Firecracker backend: each sandbox is a microVM
// of its own, booted from a guest kernel, an initramfs that holds the agent,
// the image as a read-only ext4 disk and a writable ext4 disk of the
// sandbox's own, and reached over vsock.
//
// # The guest
//
// The kernel is the one file an operator provides, with the modules it
// needs (see "The guest kernel" below). The initramfs is made here, per
// agent binary and module set, and cached: the agent as /init, the modules
// as /modules/*.ko with /modules/order, the order in which they load
// (their dependencies, read from each module's .modinfo, come first), and
// /dev/console. The image becomes an ext4 file system made with
// `mkfs.ext4 -d` from the unpacked root (label tupper-base, no journal),
// once per image: cached by Spec.Image.ChainID, or by the root's path and
// modification time when the root came from elsewhere than the image store.
// (ext4 gives the disk a /lost+found, which sandboxes see at their root.)
// Each sandbox gets a sparse ext4 disk of Resources.DiskBytes (label
// tupper-rw) holding upper/ and work/ for an overlay, and the boot
// configuration (tupper-boot.json: environment, agent arguments, host
// name, task limit), which the guest reads and removes. Disks are whole
// MiBs.
//
// In the guest, the agent runs first as init (cmd/tupper-agent,
// vminit_linux.go): it loads the modules, finds the two disks by label,
// mounts the overlay of the writable disk over the image as the root with
// /proc, /sys, /dev, /dev/pts, /dev/shm and a cgroup of its own, puts
// itself read-only at /.tupper/tupper-agent, and executes itself from there
// as the agent, PID 1 still. So a write past DiskBytes fails with ENOSPC
// inside, the guest kernel's out-of-memory killer holds the memory (the
// microVM's size, Resources.MemoryBytes), and the task limit is the guest
// cgroup's pids.max and RLIMIT_NPROC, as in the gVisor backend.
//
// # Reaching the agent
//
// The agent listens on vsock port AgentVsockPort as well as TCP, and
// relays connections on ForwardVsockPort to the guest's loopback TCP ports
// (`CONNECT <port>\n`, answered `OK\n`). The host reaches both through
// Firecracker's vsock unix socket and its own handshake (`CONNECT
// <port>\n`, answered `OK <host port>\n`): DialSandbox does it, so the
// backend is a backend.Dialer and Sandbox.AgentAddr names the socket for
// diagnostics only. The microVM has no network interface: sandboxes have
// no egress, as if the operator had set NoEgress.
//
// # The VMM
//
// Firecracker runs under its jailer (Config.NoJailer turns that off, for
// development): the jailer makes a chroot of its own per sandbox, with
// hard links to the kernel, initramfs and image disk, and the writable
// disk, runs Firecracker there as a user of the sandbox's own (one uid per
// sandbox from Config.JailerUIDBase up), and puts it in a cgroup
// <CgroupParent>/<id> whose cpu quota is Resources.CPUs and whose memory
// limit is the microVM's size plus the VMM's overhead
// (vmmOverheadBytes). On cgroup v1 hosts that mount cpuacct apart from
// cpu, the backend puts the VMM in <CgroupParent>/<id> of that hierarchy
// too (the jailer makes cgroups only where it writes a limit), so that its
// CPU time is counted apart. The backend drives Firecracker over its REST
// API on the API socket directly: machine config, boot source, the two
// drives, the vsock device, InstanceStart; PATCH /vm pauses and resumes.
// The VMM names its disks and vsock socket by the same paths in every
// sandbox: in the chroot's root with the jailer, relative to its working
// directory (the sandbox's) without, where the image disk is a link to the
// cache. A snapshot restored into another sandbox finds them so.
//
// Everything the backend makes lives under Config.Root:
//
//	<Root>/cache/                  initramfs and image disks, shared by sandboxes
//	<Root>/sandboxes/<id>/         one directory per sandbox: the mark that the
//	                               backend owns id, made first and removed last
//	    sandbox.json, pid          what Start or Restore returned, and Firecracker's pid
//	    console.log                Firecracker's output: its log and the guest's console
//	    api.sock, v.sock           the API and vsock sockets,
//	    base.ext4, rw.ext4         the image disk (a link to the cache) and the writable disk,
//	    restore.vmstate, .mem      and a restored sandbox's snapshot (links to the checkpoint's)
//	                               (without the jailer; with it they are in the chroot)
//	<Root>/jail/<exec>/<id>/root/  the jailer's chroot of sandbox id
//	<Root>/uids/<n>                the lease of uid JailerUIDBase+n, holding the id
//
// plus the cgroup <CgroupParent>/<id> in each hierarchy.
//
// # Checkpoints and stats
//
// The backend is a backend.Checkpointer through Firecracker's snapshots
// (Firecracker 1.8 or later). Checkpoint pauses the microVM (PATCH /vm),
// has Firecracker write a full snapshot into its root (PUT
// /snapshot/create: the microVM's state and its whole memory; no dirty
// page tracking, which only diff snapshots need) and moves both into the
// checkpoint directory with a copy of the writable disk (reflinked where
// the file system shares blocks, sparse otherwise), then writes
// manifest.json: the sandbox's id, Firecracker's version, the agent's
// SHA-256, the image disk's key and ChainID, the layout (jailed or not),
// the microVM's size and each file's size. The sandbox stays paused, and
// Firecracker's vsock reset has closed the connections to its guest.
// Restore starts a new VMM, as Start does, in a root of the same layout —
// the image disk by the spec's image, the checkpoint's state and memory
// linked in (readable by the jailed VMM's group only), a copy of its disk
// — and loads the snapshot before any other configuration (PUT
// /snapshot/load with a File memory backend and resume_vm). It refuses a
// checkpoint of another format, Firecracker version, image, agent or
// layout. The guest's memory stays mapped from the checkpoint's memory
// file for the sandbox's life; the restored guest's clock resumes from the
// checkpoint's moment, and its vsock connections were closed: the engine
// dials the agent again. The tests' stand-in cannot save a runc sandbox's
// memory: its snapshot keeps the guest frozen instead (see
// internal/fakefirecracker).
//
// The backend is a backend.StatsReader from the host side: the VMM's
// cgroup's CPU time and memory (less inactive file cache), and the
// microVM's size as the memory limit; see Stats.
//
// # The guest kernel
//
// Config.KernelDir holds vmlinux, an uncompressed ELF kernel (Firecracker
// on x86_64 boots no bzImage), and optionally modules/, the kernel's
// modules that the guest must load (uncompressed .ko files). The kernel
// needs virtio-mmio, virtio-blk, ext4, overlayfs, vsock and
// virtio-vsock, built in or as modules there, and either ACPI (Firecracker
// 1.8 and later describe their virtio devices in the DSDT) or
// CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES. Debian's linux-image-cloud-amd64 has
// ext4 and ACPI built in and the rest as modules, and lacks
// CMDLINE_DEVICES; guest-kernel.sh beside this file makes a KernelDir from
// it reproducibly (apt-get download of the pinned package, the vmlinux
// extracted from its vmlinuz, the modules the guest needs). Firecracker's
// own CI kernels (microvm-kernel-ci-*.config) have everything built in:
// put such a vmlinux alone in KernelDir. Either is the one file (or
// directory) the operator provides; this package never fetches one.
//
// Importing the package registers it as "firecracker" (see register.go).
package firecracker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

// Ports and addresses of the guest.
const (
	// AgentVsockPort is the vsock port the agent serves on in the guest.
	AgentVsockPort = backend.AgentPort
	// ForwardVsockPort is the agent's forwarding port in the guest.
	ForwardVsockPort = 49984
	// GuestCID is the guest's vsock context id; every microVM has its
	// own vsock device, so all may use the same.
	GuestCID = 3
)

// Defaults for the zero fields of Config.
const (
	DefaultCgroupParent = "tupper-firecracker"
	DefaultCPUs         = 1.0
	DefaultMemoryBytes  = 1 << 30
	DefaultPids         = 1024
	DefaultDiskBytes    = 10 << 30
	// DefaultKernelDir is where the guest kernel is looked for.
	DefaultKernelDir = "/var/lib/tupper/firecracker/kernel"
	// DefaultJailerUIDBase is the first uid (and gid) the jailed VMMs
	// run as; sandbox n of the host gets DefaultJailerUIDBase+n.
	DefaultJailerUIDBase = 900000
	// DefaultJailerUIDs is how many uids from the base are used: at most
	// that many sandboxes run at once.
	DefaultJailerUIDs = 65536
	// FallbackDir is where firecracker and jailer are looked for last.
	FallbackDir = "/usr/local/bin"
	// FirecrackerEnv and JailerEnv name the environment variables that
	// point at the binaries; KernelEnv the one that points at KernelDir.
	FirecrackerEnv = "TUPPER_FIRECRACKER"
	JailerEnv      = "TUPPER_JAILER"
	KernelEnv      = "TUPPER_FIRECRACKER_KERNEL"
)

// Limits on sandboxes' resources.
const (
	// minMemoryBytes is the smallest microVM: the kernel, the initramfs
	// (the agent is most of it) and the agent must fit with room to run.
	minMemoryBytes = 128 << 20
	// minDiskBytes is the smallest writable disk: ext4's own metadata and
	// the agent's first writes must fit.
	minDiskBytes = 32 << 20
	// maxVCPUs is Firecracker's limit.
	maxVCPUs = 32
)

// Config configures a Backend.
type Config struct {
	// Root is the directory the backend owns for its state. Required and
	// absolute; two backends must never share one.
	Root string
	// Logger receives the backend's logs; nil means slog.Default().
	Logger *slog.Logger
	// FirecrackerPath is the firecracker binary. Empty means
	// $TUPPER_FIRECRACKER, then firecracker on $PATH, then
	// /usr/local/bin/firecracker.
	FirecrackerPath string
	// JailerPath is the jailer binary, of the same release as
	// Firecracker. Empty means $TUPPER_JAILER, then jailer on $PATH, then
	// /usr/local/bin/jailer. Unused with NoJailer.
	JailerPath string
	// NoJailer runs Firecracker directly, as the daemon's user, without
	// the jailer's chroot, namespaces and uid; for development and the
	// tests' stand-in. The cgroup limits hold all the same.
	NoJailer bool
	// JailerUIDBase and JailerUIDs are the range of uids (equal gids) the
	// jailed VMMs run as, one per sandbox; zero means
	// DefaultJailerUIDBase and DefaultJailerUIDs.
	JailerUIDBase int
	JailerUIDs    int
	// KernelDir holds the guest kernel (vmlinux) and its modules
	// (modules/*.ko); see the package doc. Empty means
	// $TUPPER_FIRECRACKER_KERNEL, then DefaultKernelDir.
	KernelDir string
	// BootArgs are added to the guest kernel's command line.
	BootArgs string
	// CgroupParent is the cgroup, relative to each hierarchy's root, under
	// which each sandbox's VMM gets <CgroupParent>/<id>. Empty means
	// DefaultCgroupParent.
	CgroupParent string
	// DefaultCPUs, DefaultMemoryBytes, DefaultPids and DefaultDiskBytes
	// replace the zero fields of a Spec's Resources. Zero means 1 CPU,
	// 1 GiB, 1024 and 10 GiB.
	DefaultCPUs        float64
	DefaultMemoryBytes int64
	DefaultPids        int64
	DefaultDiskBytes   int64
	// StartTimeout bounds the wait for Firecracker's API socket after the
	// process starts; zero means 10 seconds.
	StartTimeout time.Duration
}

var cgroupPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$`)

// Validate reports whether c can make a Backend; zero optional fields are
// fine. Its errors are of class errdefs.ErrInvalidArgument. It does not look
// for the binaries or the kernel; New does.
func (c *Config) Validate() error {
	var errs []error
	if c.Root == "" {
		errs = append(errs, errors.New("Root is required"))
	} else if !filepath.IsAbs(c.Root) {
		errs = append(errs, fmt.Errorf("Root %q must be absolute", c.Root))
	}
	for name, p := range map[string]string{"FirecrackerPath": c.FirecrackerPath, "JailerPath": c.JailerPath, "KernelDir": c.KernelDir} {
		if p != "" && !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q must be absolute", name, p))
		}
	}
	if c.FirecrackerPath != "" && !c.NoJailer && !strings.Contains(filepath.Base(c.FirecrackerPath), "firecracker") {
		errs = append(errs, fmt.Errorf("FirecrackerPath %q: the jailer runs only a file whose name holds \"firecracker\"", c.FirecrackerPath))
	}
	if c.CgroupParent != "" && (!cgroupPattern.MatchString(c.CgroupParent) || path.Clean(c.CgroupParent) != c.CgroupParent || strings.Contains("/"+c.CgroupParent+"/", "/../")) {
		errs = append(errs, fmt.Errorf("CgroupParent %q must be a relative cgroup path", c.CgroupParent))
	}
	if c.DefaultCPUs < 0 || c.DefaultMemoryBytes < 0 || c.DefaultPids < 0 || c.DefaultDiskBytes < 0 {
		errs = append(errs, errors.New("default resources must not be negative"))
	}
	if c.DefaultMemoryBytes != 0 && c.DefaultMemoryBytes < minMemoryBytes {
		errs = append(errs, fmt.Errorf("DefaultMemoryBytes %d is below %d MiB", c.DefaultMemoryBytes, minMemoryBytes>>20))
	}
	if c.JailerUIDBase < 0 || c.JailerUIDs < 0 || (c.JailerUIDBase != 0 && c.JailerUIDBase < 1000) {
		errs = append(errs, fmt.Errorf("JailerUIDBase %d and JailerUIDs %d: want a range of unused uids above 1000", c.JailerUIDBase, c.JailerUIDs))
	}
	if strings.ContainsAny(c.BootArgs, "\n\x00") {
		errs = append(errs, errors.New("BootArgs must be one line"))
	}
	if c.StartTimeout < 0 {
		errs = append(errs, errors.New("StartTimeout must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("firecracker config: %w: %w", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

// withDefaults returns c with its zero fields filled in. It does not look
// for the binaries.
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.KernelDir == "" {
		c.KernelDir = os.Getenv(KernelEnv)
	}
	if c.KernelDir == "" {
		c.KernelDir = DefaultKernelDir
	}
	if c.CgroupParent == "" {
		c.CgroupParent = DefaultCgroupParent
	}
	if c.JailerUIDBase == 0 {
		c.JailerUIDBase = DefaultJailerUIDBase
	}
	if c.JailerUIDs == 0 {
		c.JailerUIDs = DefaultJailerUIDs
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
	if c.StartTimeout == 0 {
		c.StartTimeout = 10 * time.Second
	}
	return c
}

// FindFirecracker returns the firecracker binary to use when
// Config.FirecrackerPath is empty: $TUPPER_FIRECRACKER, then firecracker
// on $PATH, then /usr/local/bin/firecracker. It fails with
// errdefs.ErrUnavailable when none exists.
func FindFirecracker() (string, error) { return findBinary("firecracker", FirecrackerEnv) }

// FindJailer is FindFirecracker for the jailer ($TUPPER_JAILER).
func FindJailer() (string, error) { return findBinary("jailer", JailerEnv) }

func findBinary(name, env string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return checkExecutable(name, p)
	}
	if p, err := exec.LookPath(name); err == nil {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		return checkExecutable(name, abs)
	}
	return checkExecutable(name, filepath.Join(FallbackDir, name))
}

func checkExecutable(name, path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %w", name, path, errdefs.ErrUnavailable, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s %s: not an executable file: %w", name, path, errdefs.ErrUnavailable)
	}
	return path, nil
}
