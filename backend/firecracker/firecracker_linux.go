package firecracker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/idlock"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/cleanup"
	"github.com/lightbearco/tupper/network"
)

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Dialer  = (*Backend)(nil)
	_ backend.Waiter  = (*Backend)(nil)
	_ backend.Pauser  = (*Backend)(nil)
)

const (
	// cleanupTimeout bounds the undo of a failed Start, which runs even
	// when the Start's ctx is done.
	cleanupTimeout = 30 * time.Second
	// apiTimeout bounds one API call that changes the microVM's state.
	apiTimeout = 30 * time.Second
	// stateTimeout bounds the API call of State.
	stateTimeout = 5 * time.Second
	// stopGrace is how long Stop lets what is left in the VMM's cgroup,
	// once the VMM is killed, end on its own before it is killed too.
	stopGrace = 30 * time.Second
)

// Files in a sandbox's directory.
const (
	recordFile  = "sandbox.json"
	pidFile     = "pid"
	consoleFile = "console.log"
	stagingDir  = "rw.staging"
)

// Backend runs sandboxes as Firecracker microVMs. It is safe for concurrent
// use; calls for one id are serialized.
type Backend struct {
	cfg         Config
	log         *slog.Logger
	firecracker string
	jailer      string // empty with NoJailer
	mkfs        string
	kernel      string // the vmlinux
	modules     []kernelModule
	cgroups     cgroupHost
	sandboxes   string
	cache       string
	chrootBase  string
	uids        uidLeases
	locks       idlock.Locks

	// cacheMu serializes the making of cached files by this process;
	// lockFile keeps other processes out.
	cacheMu sync.Mutex
	// agentSums caches agent binaries' hashes by path, size and time.
	sumMu     sync.Mutex
	agentSums map[string]string

	// failAt, when set by a test, makes Start fail right after the step
	// it names, to check that the undo leaves nothing behind.
	failAt string
}

// New makes a Backend from cfg: it fills in defaults, finds Firecracker,
// the jailer, mkfs.ext4 and the guest kernel, reads the kernel's modules,
// and makes the directories under cfg.Root. It fails with
// errdefs.ErrInvalidArgument for a bad cfg and errdefs.ErrUnavailable when
// something it needs is missing.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	b := &Backend{
		cfg:        cfg,
		log:        cfg.Logger.With("backend", "firecracker"),
		sandboxes:  filepath.Join(cfg.Root, "sandboxes"),
		cache:      filepath.Join(cfg.Root, "cache"),
		chrootBase: filepath.Join(cfg.Root, "jail"),
		agentSums:  map[string]string{},
	}
	var err error
	if cfg.FirecrackerPath != "" {
		b.firecracker, err = checkExecutable("firecracker", cfg.FirecrackerPath)
	} else {
		b.firecracker, err = FindFirecracker()
	}
	if err != nil {
		return nil, err
	}
	if !cfg.NoJailer {
		if cfg.JailerPath != "" {
			b.jailer, err = checkExecutable("jailer", cfg.JailerPath)
		} else {
			b.jailer, err = FindJailer()
		}
		if err != nil {
			return nil, err
		}
		if !strings.Contains(filepath.Base(b.firecracker), "firecracker") {
			return nil, fmt.Errorf("firecracker %s: the jailer runs only a file whose name holds \"firecracker\": %w", b.firecracker, errdefs.ErrInvalidArgument)
		}
	}
	if b.mkfs, err = exec.LookPath("mkfs.ext4"); err != nil {
		return nil, fmt.Errorf("mkfs.ext4 (e2fsprogs): %w: %w", errdefs.ErrUnavailable, err)
	}
	b.kernel = filepath.Join(cfg.KernelDir, kernelName)
	if fi, err := os.Stat(b.kernel); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("guest kernel %s: %w (see guest-kernel.sh in backend/firecracker)", b.kernel, errdefs.ErrUnavailable)
	}
	if b.modules, err = readModules(filepath.Join(cfg.KernelDir, "modules")); err != nil {
		return nil, fmt.Errorf("guest kernel: %w: %w", errdefs.ErrUnavailable, err)
	}
	if b.cgroups, err = findCgroups(); err != nil {
		return nil, fmt.Errorf("firecracker: %w: %w", errdefs.ErrUnavailable, err)
	}
	b.uids = uidLeases{dir: filepath.Join(cfg.Root, "uids"), base: cfg.JailerUIDBase, count: cfg.JailerUIDs}
	for _, d := range []string{cfg.Root, b.sandboxes, b.cache, b.chrootBase, b.uids.dir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("firecracker: %w", err)
		}
	}
	return b, nil
}

func (b *Backend) sandboxDir(id string) string { return filepath.Join(b.sandboxes, id) }

// jailDir is what the jailer makes for sandbox id: <chroot base>/<exec
// name>/<id>, whose root/ is the chroot.
func (b *Backend) jailDir(id string) string {
	return filepath.Dir(chrootRoot(b.chrootBase, b.firecracker, id))
}

// vmRoot is the directory that holds the VMM's files of sandbox id on the
// host: the chroot with the jailer, else the sandbox's directory.
func (b *Backend) vmRoot(id string) string {
	if b.jailer != "" {
		return chrootRoot(b.chrootBase, b.firecracker, id)
	}
	return b.sandboxDir(id)
}

func (b *Backend) apiSockPath(id string) string {
	if b.jailer != "" {
		return filepath.Join(b.vmRoot(id), strings.TrimPrefix(jailAPISock, "/"))
	}
	return filepath.Join(b.sandboxDir(id), apiSockName)
}

func (b *Backend) vsockPath(id string) string { return filepath.Join(b.vmRoot(id), vsockName) }

// guestPath is how the VMM names the file name in its root: in the
// chroot's root with the jailer; relative to its working directory, the
// sandbox's directory, without. Either way the path is the same for every
// sandbox, as a snapshot restored in another one's root needs: Firecracker
// opens the drives and binds the vsock socket at the paths they had.
func (b *Backend) guestPath(name string) string {
	if b.jailer != "" {
		return "/" + name
	}
	return name
}

// record is what the backend keeps about a running sandbox, in
// <sandbox dir>/sandbox.json.
type record struct {
	backend.Sandbox
	Jailed    bool  `json:"jailed,omitempty"`
	UID       int   `json:"uid,omitempty"`
	VCPUs     int   `json:"vcpus"`
	MemoryMiB int64 `json:"memoryMiB"`
	// CPUs is the VMM's cpu quota, in cores.
	CPUs      float64 `json:"cpus"`
	DiskBytes int64   `json:"diskBytes"`
	ImageKey  string  `json:"imageKey"`
	// ChainID is the image's, when the image store gave one.
	ChainID string `json:"chainID,omitempty"`
	// AgentSum is the SHA-256 of the agent in the guest's initramfs;
	// VMMVersion what Firecracker said of itself.
	AgentSum   string            `json:"agentSha256"`
	VMMVersion string            `json:"vmmVersion"`
	Labels     map[string]string `json:"labels,omitempty"`
	// RestoredFrom is the checkpoint directory a restored sandbox came
	// from, for diagnostics.
	RestoredFrom string `json:"restoredFrom,omitempty"`
}

// limits are a sandbox's resources with the defaults filled in.
type limits struct {
	CPUs        float64
	MemoryBytes int64
	Pids        int64
	DiskBytes   int64
}

func (b *Backend) resolve(r backend.Resources) limits {
	l := limits{CPUs: r.CPUs, MemoryBytes: r.MemoryBytes, Pids: r.Pids, DiskBytes: r.DiskBytes}
	if l.CPUs == 0 {
		l.CPUs = b.cfg.DefaultCPUs
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = b.cfg.DefaultMemoryBytes
	}
	if l.Pids == 0 {
		l.Pids = b.cfg.DefaultPids
	}
	if l.DiskBytes == 0 {
		l.DiskBytes = b.cfg.DefaultDiskBytes
	}
	return l
}

// bootArgs is the guest kernel's command line.
func (b *Backend) bootArgs() string {
	args := "console=ttyS0 reboot=k panic=1 pci=off quiet rdinit=" + initPath
	if b.cfg.BootArgs != "" {
		args += " " + b.cfg.BootArgs
	}
	return args
}

// Start boots spec as described by backend.Backend. Its steps: claim the
// sandbox directory; make (or find in the cache) the initramfs and the
// image disk; fill the VMM's root (with the jailer, lease a uid and make
// the chroot); make the writable disk; make the VMM's cgroup (without the
// jailer); start the VMM and wait for its API socket; configure the
// microVM and start it; record it. A failure undoes the steps done, in
// reverse. ctx bounds the making of disks and the wait for the socket;
// the API calls that follow run to their end (each bounded by
// apiTimeout), as a VMM left half configured is harder to clean than a
// Start that took a little longer.
func (b *Backend) Start(ctx context.Context, spec *backend.Spec) (_ *backend.Sandbox, retErr error) {
	if spec == nil {
		return nil, fmt.Errorf("firecracker start: nil spec: %w", errdefs.ErrInvalidArgument)
	}
	if err := validateSpec(spec); err != nil {
		return nil, err
	}
	id := spec.ID
	defer b.locks.Lock(id)()
	l := b.newLaunch(id, "start")
	defer l.end(&retErr)

	t := time.Now()
	if err := b.claim(id, &l.undo); err != nil {
		return nil, err
	}
	if err := l.step("claim", t); err != nil {
		return nil, err
	}

	// The cached parts: initramfs and image disk.
	t = time.Now()
	agentSum, err := b.agentSum(spec.Agent.Path)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	initramfs, err := b.initramfs(ctx, agentSum, spec.Agent.Path)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := l.step("initramfs", t); err != nil {
		return nil, err
	}
	t = time.Now()
	key, baseDisk, err := b.baseDisk(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := l.step("image disk", t); err != nil {
		return nil, err
	}

	// The VMM's root. Without the chroot, the kernel and initramfs are
	// used in place: only the disks are named relative to the VMM's
	// working directory, as a snapshot restored elsewhere needs them.
	t = time.Now()
	links := map[string]string{baseDiskName: baseDisk}
	if b.jailer != "" {
		links[kernelName], links[initramfsName] = b.kernel, initramfs
	}
	uid, gid, err := b.fillRoot(id, links, &l.undo)
	if err != nil {
		return nil, err
	}
	if err := l.step(b.rootStep(), t); err != nil {
		return nil, err
	}

	// The writable disk, with the boot configuration.
	t = time.Now()
	lim := b.resolve(spec.Resources)
	hostname := spec.Hostname
	if hostname == "" {
		hostname = id
	}
	rwDisk := filepath.Join(b.vmRoot(id), rwDiskName)
	boot := &bootConfig{Hostname: hostname, Env: spec.Env, Args: agentArgs(spec), Pids: lim.Pids}
	if err := makeRWDisk(ctx, b.mkfs, rwDisk, filepath.Join(b.sandboxDir(id), stagingDir), lim.DiskBytes, boot); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := os.Chown(rwDisk, uid, gid); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := l.step("writable disk", t); err != nil {
		return nil, err
	}

	vmm, err := b.startVMM(ctx, l, uid, gid, lim)
	if err != nil {
		return nil, err
	}
	defer vmm.api.close()

	t = time.Now()
	vm := vmConfig{
		VCPUs:      vcpus(lim.CPUs),
		MemSizeMiB: memMiB(lim.MemoryBytes),
		Kernel:     b.guestPath(kernelName),
		Initrd:     b.guestPath(initramfsName),
		BootArgs:   b.bootArgs(),
		BaseDisk:   b.guestPath(baseDiskName),
		RWDisk:     b.guestPath(rwDiskName),
		VsockPath:  b.guestPath(vsockName),
	}
	if b.jailer == "" {
		vm.Kernel, vm.Initrd = b.kernel, initramfs
	}
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
	defer acancel()
	if err := vmm.api.run(actx, bootSteps(vm)); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w: %s", id, err, oci.Tail(filepath.Join(b.sandboxDir(id), consoleFile), 2048))
	}
	if err := l.step("boot", t); err != nil {
		return nil, err
	}

	rec := record{
		Jailed: b.jailer != "", UID: uid, VCPUs: vm.VCPUs, MemoryMiB: vm.MemSizeMiB, CPUs: lim.CPUs,
		DiskBytes: lim.DiskBytes, ImageKey: key, AgentSum: agentSum, VMMVersion: vmm.version, Labels: spec.Labels,
	}
	if spec.Image != nil {
		rec.ChainID = spec.Image.ChainID
	}
	return b.finish(l, vmm.pid, rec)
}

// launch is one Start or Restore under way: its log, its undo stack and
// its steps.
type launch struct {
	b     *Backend
	id    string
	op    string
	log   *slog.Logger
	begin time.Time
	undo  cleanup.Stack
}

func (b *Backend) newLaunch(id, op string) *launch {
	return &launch{b: b, id: id, op: op, log: b.log.With("sandbox", id, "op", op), begin: time.Now()}
}

// step marks step name done; it fails when a test asked the backend to
// fail right after it (Backend.failAt).
func (l *launch) step(name string, since time.Time) error {
	l.log.Debug("step done", "step", name, "took", time.Since(since))
	if l.b.failAt == name {
		return fmt.Errorf("sandbox %q: injected failure after step %s", l.id, name)
	}
	return nil
}

// end undoes the steps done when *errp is set, and adds what the undo
// could not remove to it.
func (l *launch) end(errp *error) {
	if *errp == nil {
		return
	}
	if err := l.undo.Run(); err != nil {
		l.log.Error("undo of a failed "+l.op+" left something behind", "err", err)
		*errp = errors.Join(*errp, fmt.Errorf("cleanup: %w", err))
	}
	l.log.Info(l.op+" failed", "err", *errp, "took", time.Since(l.begin))
}

// rootStep names the step that fills the VMM's root.
func (b *Backend) rootStep() string {
	if b.jailer != "" {
		return "chroot"
	}
	return "files"
}

// claim makes sandbox id's directory, the mark that the backend holds id,
// after checking that nothing of an earlier sandbox id is left.
func (b *Backend) claim(id string, undo *cleanup.Stack) error {
	dir := b.sandboxDir(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("sandbox %q: %w", id, err)
	}
	undo.Add(func() error { return os.RemoveAll(dir) })
	if _, err := os.Lstat(b.jailDir(id)); err == nil {
		return fmt.Errorf("sandbox %q: %s is left from an earlier one; Stop it first: %w", id, b.jailDir(id), errdefs.ErrAlreadyExists)
	}
	if dirs, err := oci.CgroupDirs(cgroupRel(b.cfg.CgroupParent, id)); err != nil || len(dirs) > 0 {
		return fmt.Errorf("sandbox %q: cgroup %s in use (%v): %w", id, cgroupRel(b.cfg.CgroupParent, id), err, errdefs.ErrAlreadyExists)
	}
	return nil
}

// fillRoot makes the VMM's root of sandbox id and links the files of
// links (name in the root → file) into it: with the jailer, it leases a
// uid and makes the chroot; without, the root is the sandbox's directory.
// It returns the uid and gid the VMM runs as.
func (b *Backend) fillRoot(id string, links map[string]string, undo *cleanup.Stack) (uid, gid int, err error) {
	root := b.vmRoot(id)
	uid, gid = os.Getuid(), os.Getgid()
	if b.jailer != "" {
		if uid, err = b.uids.claim(id); err != nil {
			return 0, 0, fmt.Errorf("sandbox %q: %w", id, err)
		}
		gid = uid
		undo.Add(func() error { return b.uids.release(id) })
		undo.Add(func() error { return oci.RemoveBundle(b.jailDir(id)) })
		if err := os.MkdirAll(root, 0o700); err != nil {
			return 0, 0, fmt.Errorf("sandbox %q: %w", id, err)
		}
	}
	for name, src := range links {
		if err := linkOrCopy(src, filepath.Join(root, name)); err != nil {
			return 0, 0, fmt.Errorf("sandbox %q: %s: %w", id, b.rootStep(), err)
		}
	}
	return uid, gid, nil
}

// runningVMM is a VMM started and answering on its API socket.
type runningVMM struct {
	pid     int
	api     *apiClient
	version string // its vmm_version
}

// startVMM makes the VMM's cgroup (the jailer makes it when there is
// one), starts the VMM in it with its output in console.log, and waits
// for its API. Its steps are "cgroup", "spawn" and "api socket".
func (b *Backend) startVMM(ctx context.Context, l *launch, uid, gid int, lim limits) (*runningVMM, error) {
	id, dir := l.id, b.sandboxDir(l.id)
	t := time.Now()
	cgRel := cgroupRel(b.cfg.CgroupParent, id)
	vmmLim := vmmLimits(b.cgroups.Version, lim.CPUs, lim.MemoryBytes)
	l.undo.Add(func() error {
		// What the VMM leaves in its cgroup gets stopGrace to end, as
		// in Stop: the VMM itself is killed before this runs.
		drainCgroup(cgRel, stopGrace)
		return oci.RemoveCgroup(cgRel)
	})
	var cgDirs []string
	var err error
	if b.jailer == "" {
		if cgDirs, err = makeVMMCgroup(b.cgroups, cgRel, vmmLim); err != nil {
			return nil, fmt.Errorf("sandbox %q: %w", id, err)
		}
	}
	if err := l.step("cgroup", t); err != nil {
		return nil, err
	}

	t = time.Now()
	var argv []string
	if b.jailer != "" {
		argv = jailerArgs(jailerSpec{
			Jailer: b.jailer, Firecracker: b.firecracker, ID: id, UID: uid, GID: gid,
			ChrootBase: b.chrootBase, CgroupVersion: b.cgroups.Version, CgroupParent: b.cfg.CgroupParent, Limits: vmmLim,
		})
	} else {
		argv = firecrackerArgs(b.firecracker, id)
	}
	console, err := os.OpenFile(filepath.Join(dir, consoleFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	defer console.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = console, console
	// Its own session: a signal to the daemon's group must not reach
	// the VMM, whose life is the sandbox's, not the daemon's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sandbox %q: start %s: %w", id, argv[0], err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		cmd.Wait() // reaps it; Wait and State look at the pid
		close(exited)
	}()
	l.undo.Add(func() error { return killVMM(pid, id, exited) })
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(pid)), 0o600); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	// A VMM that is gone already is reported by the wait below, with its
	// output.
	if cgDirs != nil {
		err = joinCgroup(cgDirs, pid)
	} else {
		err = joinAcctCgroup(b.cgroups, cgRel, pid)
	}
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := l.step("spawn", t); err != nil {
		return nil, err
	}

	t = time.Now()
	api := newAPIClient(b.apiSockPath(id))
	info, err := b.waitAPI(ctx, api, exited)
	if err != nil {
		api.close()
		return nil, fmt.Errorf("sandbox %q: %w: %s", id, err, oci.Tail(filepath.Join(dir, consoleFile), 2048))
	}
	if err := l.step("api socket", t); err != nil {
		api.close()
		return nil, err
	}
	return &runningVMM{pid: pid, api: api, version: info.VMMVersion}, nil
}

// finish writes rec, what the backend keeps of the sandbox, and ends the
// launch: it is the "record" step.
func (b *Backend) finish(l *launch, pid int, rec record) (*backend.Sandbox, error) {
	t := time.Now()
	rec.Sandbox = backend.Sandbox{
		ID:        l.id,
		AgentAddr: net.JoinHostPort(b.vsockPath(l.id), strconv.Itoa(AgentVsockPort)),
		Pid:       pid,
		StartedAt: time.Now().UTC(),
	}
	if err := oci.WriteJSON(filepath.Join(b.sandboxDir(l.id), recordFile), rec); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", l.id, err)
	}
	if err := l.step("record", t); err != nil {
		return nil, err
	}
	l.undo.Release()
	l.log.Info("sandbox "+map[string]string{"start": "started", "restore": "restored"}[l.op], "pid", pid, "vcpus", rec.VCPUs, "memMiB", rec.MemoryMiB, "jailed", rec.Jailed, "took", time.Since(l.begin))
	sb := rec.Sandbox
	return &sb, nil
}

// waitAPI waits until the VMM answers on its API socket, it exits, ctx
// ends or the start timeout passes, and returns its first answer.
func (b *Backend) waitAPI(ctx context.Context, api *apiClient, exited <-chan struct{}) (*instanceInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.StartTimeout)
	defer cancel()
	var last error
	for {
		ictx, icancel := context.WithTimeout(ctx, time.Second)
		info, err := api.info(ictx)
		icancel()
		if err == nil {
			return info, nil
		}
		last = err
		select {
		case <-exited:
			return nil, errors.New("the VMM exited before it served its API")
		case <-ctx.Done():
			return nil, fmt.Errorf("the VMM's API did not answer: %w (last: %v)", context.Cause(ctx), last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// killVMM kills the VMM process pid of sandbox id and waits until it has
// exited; exited, when not nil, closes once this process reaped it.
func killVMM(pid int, id string, exited <-chan struct{}) error {
	if !ownsProcess(pid, id) {
		return nil
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill the VMM (pid %d): %w", pid, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if exited != nil {
		select {
		case <-exited:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("the VMM (pid %d) did not exit after SIGKILL", pid)
		}
	}
	return oci.WaitProcess(ctx, pid, id)
}

// ownsProcess reports whether process pid is sandbox id's VMM: its command
// line names id (Firecracker's --id, which the jailer passes on too). A
// pid file may outlive its process, and the pid go to another.
func ownsProcess(pid int, id string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	for _, arg := range strings.Split(string(b), "\x00") {
		if arg == id || arg == "--id="+id {
			return true
		}
	}
	return false
}

// alive reports whether pid runs and has not exited (a zombie has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// initramfs returns the cached initramfs of agent, whose SHA-256 is sum,
// and the kernel's modules, making it first if needed.
func (b *Backend) initramfs(ctx context.Context, sum, agent string) (string, error) {
	path := filepath.Join(b.cache, "initramfs-"+initramfsKey(sum, b.modules)+".cpio")
	return path, b.cached(path, func(tmp string) error {
		f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		err = writeInitramfs(f, agent, b.modules)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("initramfs: %w", err)
		}
		return nil
	})
}

// baseDisk returns the cache key and the cached image disk of spec's root,
// making it first if needed.
func (b *Backend) baseDisk(ctx context.Context, spec *backend.Spec) (string, string, error) {
	key, err := imageKey(spec)
	if err != nil {
		return "", "", fmt.Errorf("image disk: %w", err)
	}
	path := filepath.Join(b.cache, "image-"+key+".ext4")
	err = b.cached(path, func(tmp string) error {
		begin := time.Now()
		if err := makeBaseDisk(ctx, b.mkfs, spec.RootFS, tmp); err != nil {
			return err
		}
		b.log.Info("image disk made", "root", spec.RootFS, "disk", path, "took", time.Since(begin))
		return nil
	})
	return key, path, err
}

// cached makes the file at path with build, unless it exists: build writes
// a temporary file that is renamed into place once complete, so a file at
// path is always whole. Other processes that share the cache wait on a
// lock file beside it.
func (b *Backend) cached(path string, build func(tmp string) error) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	if err := build(tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	// The jailed VMMs read it through a hard link, as their own uid.
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// agentSum returns the SHA-256 of the agent binary at path, remembered by
// its size and modification time.
func (b *Backend) agentSum(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	k := fmt.Sprintf("%s %d %d", path, fi.Size(), fi.ModTime().UnixNano())
	b.sumMu.Lock()
	sum, ok := b.agentSums[k]
	b.sumMu.Unlock()
	if ok {
		return sum, nil
	}
	if sum, err = fileSum(path); err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	b.sumMu.Lock()
	b.agentSums[k] = sum
	b.sumMu.Unlock()
	return sum, nil
}

// linkOrCopy hard-links src at dst, or copies it where a link cannot be
// made (another file system).
func linkOrCopy(src, dst string) error {
	err := os.Link(src, dst)
	if err == nil || !errors.Is(err, unix.EXDEV) {
		return err
	}
	out, err := exec.Command("cp", "--sparse=always", "--", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copy %s: %w: %s", src, err, out)
	}
	return nil
}

// validateSpec checks spec before anything is made: oci.ValidateSpec's
// checks, with the guest's floors, and no more vCPUs than Firecracker
// gives a VM.
func validateSpec(s *backend.Spec) error {
	if err := oci.ValidateSpec(s, oci.Floors{MemoryBytes: minMemoryBytes, MemoryWhy: "too small for the guest", DiskBytes: minDiskBytes}); err != nil {
		return err
	}
	if s.Resources.CPUs > maxVCPUs {
		return fmt.Errorf("sandbox %q: %v CPUs is above Firecracker's %d vCPUs: %w", s.ID, s.Resources.CPUs, maxVCPUs, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Stop kills sandbox id's VMM and removes everything of it: what is left
// in its cgroup (after stopGrace), the cgroup, the chroot, the uid lease
// and the sandbox directory, last, so that a failed Stop can be retried
// and List still reports the id. It is idempotent.
func (b *Backend) Stop(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.locks.Lock(id)()
	begin := time.Now()
	dir := b.sandboxDir(id)
	_, statErr := os.Stat(dir)
	owned := statErr == nil

	var errs []error
	if pid, err := oci.ReadPid(filepath.Join(dir, pidFile)); err == nil {
		if err := killVMM(pid, id, nil); err != nil {
			errs = append(errs, err)
		}
	}
	rel := cgroupRel(b.cfg.CgroupParent, id)
	if !drainCgroup(rel, stopGrace) {
		b.log.Warn("processes left in the VMM's cgroup after its end; killing them", "sandbox", id, "op", "stop")
	}
	if err := oci.RemoveCgroup(rel); err != nil {
		errs = append(errs, err)
	}
	if err := oci.RemoveBundle(b.jailDir(id)); err != nil {
		errs = append(errs, err)
	}
	if err := b.uids.release(id); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		b.log.Warn("stop incomplete", "sandbox", id, "op", "stop", "err", err)
		return fmt.Errorf("sandbox %q: stop: %w", id, err)
	}
	if owned {
		b.log.Info("sandbox stopped", "sandbox", id, "op", "stop", "took", time.Since(begin))
	}
	return nil
}

// State reports the state of sandbox id: stopped when its VMM is gone,
// else what the VMM's API says. A VMM that runs but does not answer is
// "could not tell".
func (b *Backend) State(ctx context.Context, id string) (backend.State, error) {
	if err := network.ValidateID(id); err != nil {
		return "", err
	}
	held, err := b.holds(id)
	if err != nil {
		return "", fmt.Errorf("sandbox %q: state: %w", id, err)
	}
	if !held {
		return "", fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	pid, err := oci.ReadPid(filepath.Join(b.sandboxDir(id), pidFile))
	if err != nil || !alive(pid) || !ownsProcess(pid, id) {
		return backend.StateStopped, nil
	}
	api := newAPIClient(b.apiSockPath(id))
	defer api.close()
	sctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	info, err := api.info(sctx)
	if err != nil {
		if !alive(pid) {
			return backend.StateStopped, nil
		}
		return "", fmt.Errorf("sandbox %q: could not tell its state: %w", id, err)
	}
	switch info.State {
	case instanceRunning:
		return backend.StateRunning, nil
	case instancePaused:
		return backend.StatePaused, nil
	default: // "Not started": a Start cut short
		return backend.StateStopped, nil
	}
}

// readRecord reads sandbox id's record. It fails with errdefs.ErrNotFound
// when the backend holds no started sandbox id.
func (b *Backend) readRecord(id string) (*record, error) {
	data, err := os.ReadFile(filepath.Join(b.sandboxDir(id), recordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("sandbox %q: %s: %w", id, recordFile, err)
	}
	return &rec, nil
}

// holds reports whether the backend has anything at all for id.
func (b *Backend) holds(id string) (bool, error) {
	ids, err := b.List(context.Background())
	if err != nil {
		return false, err
	}
	return slices.Contains(ids, id), nil
}

// List returns every id with a sandbox directory, a chroot, a cgroup or a
// uid lease in this backend's Root and cgroup parent.
func (b *Backend) List(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	for _, d := range []string{b.sandboxes, filepath.Dir(b.jailDir("x"))} {
		entries, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("firecracker list: %w", err)
		}
		for _, e := range entries {
			set[e.Name()] = true
		}
	}
	dirs, err := oci.CgroupDirs("/" + b.cfg.CgroupParent)
	if err != nil {
		return nil, fmt.Errorf("firecracker list: %w", err)
	}
	for _, d := range dirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if e.IsDir() {
				set[e.Name()] = true
			}
		}
	}
	held, err := b.uids.holders()
	if err != nil {
		return nil, fmt.Errorf("firecracker list: %w", err)
	}
	for _, id := range held {
		set[id] = true
	}
	out := make([]string, 0, len(set))
	for id := range set {
		if network.ValidateID(id) == nil {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Wait blocks until sandbox id's VMM exits (the guest's init ended, the
// guest restarted, the VMM crashed or was killed) or ctx ends.
func (b *Backend) Wait(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	pid, err := oci.ReadPid(filepath.Join(b.sandboxDir(id), pidFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox %q: wait: %w", id, err)
	}
	return oci.WaitProcess(ctx, pid, id)
}

// DialSandbox connects to TCP port inside sandbox id over its vsock: the
// agent's port directly, any other through the agent's forwarding port.
func (b *Backend) DialSandbox(ctx context.Context, id string, port int) (net.Conn, error) {
	if err := network.ValidateID(id); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(b.sandboxDir(id), recordFile)); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	c, err := dialGuest(ctx, b.vsockPath(id), port)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	return c, nil
}

// Pause freezes sandbox id's vCPUs.
func (b *Backend) Pause(ctx context.Context, id string) error {
	return b.withAPI(ctx, id, "pause", (*apiClient).pause)
}

// Resume thaws sandbox id's vCPUs.
func (b *Backend) Resume(ctx context.Context, id string) error {
	return b.withAPI(ctx, id, "resume", (*apiClient).resume)
}

func (b *Backend) withAPI(ctx context.Context, id, op string, call func(*apiClient, context.Context) error) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.locks.Lock(id)()
	if _, err := os.Stat(filepath.Join(b.sandboxDir(id), recordFile)); err != nil {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	api := newAPIClient(b.apiSockPath(id))
	defer api.close()
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
	defer cancel()
	if err := call(api, actx); err != nil {
		return fmt.Errorf("sandbox %q: %s: %w", id, op, err)
	}
	return nil
}
