package gvisor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
)

// setHostMemory raises the memory limit of the host cgroup rel (like
// "/tupper/<id>") to bytes, with memory+swap where the host limits it.
// It runs after runsc create, which has shown the sandbox its own, lower
// limit as MemTotal, and before runsc start.
func setHostMemory(rel string, bytes int64) error {
	dirs, err := oci.CgroupDirs(rel)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", rel, err)
	}
	v := []byte(strconv.FormatInt(bytes, 10))
	done := false
	for _, d := range dirs {
		switch {
		case exists(filepath.Join(d, "memory.limit_in_bytes")):
			// v1: memory+swap may never be below memory, so it goes first
			// when raising.
			if sw := filepath.Join(d, "memory.memsw.limit_in_bytes"); exists(sw) {
				if err := os.WriteFile(sw, v, 0); err != nil {
					return fmt.Errorf("cgroup %s: %w", sw, err)
				}
			}
			if err := os.WriteFile(filepath.Join(d, "memory.limit_in_bytes"), v, 0); err != nil {
				return fmt.Errorf("cgroup %s: %w", d, err)
			}
			done = true
		case exists(filepath.Join(d, "memory.max")):
			// v2: memory.swap.max is swap alone and stays as runsc set it.
			if err := os.WriteFile(filepath.Join(d, "memory.max"), v, 0); err != nil {
				return fmt.Errorf("cgroup %s: %w", d, err)
			}
			// Should the kernel end the sandbox, it ends all of it at
			// once: a sentry's memory, a memfd its stubs map too, comes
			// back only once they are all gone (see limitParent).
			if err := os.WriteFile(filepath.Join(d, "memory.oom.group"), []byte("1"), 0); err != nil {
				return fmt.Errorf("cgroup %s: %w", d, err)
			}
			done = true
		}
	}
	if !done {
		return fmt.Errorf("cgroup %s: no memory controller found in %v", rel, dirs)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// hostTaskCapacity is how many tasks the host can have at all: the
// smaller of kernel.pid_max and kernel.threads-max, and the sysctl that is.
func hostTaskCapacity() (int64, string, error) {
	var out int64
	var name string
	for _, n := range []string{"pid_max", "threads-max"} {
		f := "/proc/sys/kernel/" + n
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, "", err
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, "", fmt.Errorf("%s: %w", f, err)
		}
		if out == 0 || v < out {
			out, name = v, "kernel."+n
		}
	}
	return out, name, nil
}

// defaultReserveTasks is what the host keeps of its task capacity when
// the config names nothing: a quarter, at least 4096, for the host's own
// processes, the daemon's and the shell an operator needs to log in.
func defaultReserveTasks(capacity int64) int64 { return max(capacity/4, 4096) }

// defaultReserveMemory is what the host keeps of its memory when the
// config names nothing: 1 GiB or a sixteenth, whichever is more.
func defaultReserveMemory(total int64) int64 { return max(1<<30, total/16) }

// What admission counts for a sandbox that is starting and not yet
// measured: a little over twice an idle sandbox's measured use (about
// 28 host tasks and 19 MiB; see BENCHMARKS.md).
const (
	startTasks  = 64
	startMemory = 48 << 20
)

// hostBudget admits sandboxes by what the host can still give them, and
// holds the host's reserve whatever they do. All sandboxes live under one
// parent cgroup whose pids.max and memory limit are what the host spares
// them (its capacity less the reserve): the kernel enforces that, so no
// sandbox, nor all of them together, can take the daemon's or the host's
// share. Each sandbox keeps its own limits under the parent.
//
// A Start is admitted while, counting what the sandboxes under the parent
// use now (its pids.current, and its memory less the page cache the kernel
// reclaims) and the creates in flight:
//   - the new sandbox's start (startTasks, startMemory) and a whole
//     sandbox's burst to its own limits still fit within the parent's, so
//     that any one sandbox can always reach its limits;
//   - the sandboxes' own host limits, added up, stay within overcommit
//     times the parent's.
//
// The ledger is the cgroups themselves, read under a host-wide lock, plus
// a reservation file for each create between the check and the moment
// runsc makes its cgroup; several daemons on one host share it.
type hostBudget struct {
	dir        string // <SharedRoot>/pid-budget: the lock and the reservations
	parent     string // the cgroup parent, "/tupper"
	tasks      int64  // host tasks the sandboxes may hold together
	memory     int64  // host memory they may use together
	overcommit float64
	// raiseTasks and raiseMemory say what lifts each budget.
	raiseTasks, raiseMemory string
}

// newHostBudget returns cfg's budget (see Config.HostPids and HostMemory).
// A budget above what the host spares fails with
// errdefs.ErrInvalidArgument.
func newHostBudget(cfg Config) (*hostBudget, error) {
	capacity, sysctl, err := hostTaskCapacity()
	if err != nil {
		return nil, fmt.Errorf("gvisor: host task capacity: %w", err)
	}
	b := &hostBudget{dir: filepath.Join(cfg.SharedRoot, "pid-budget"), parent: cfg.CgroupParent, overcommit: cfg.Overcommit}
	reserve := cfg.ReserveTasks
	if reserve == 0 {
		reserve = defaultReserveTasks(capacity)
	}
	spare := capacity - reserve
	if spare <= 0 {
		return nil, fmt.Errorf("gvisor config: the host keeps %d tasks (ReserveTasks) of its %d (%s): none left for sandboxes: %w", reserve, capacity, sysctl, errdefs.ErrInvalidArgument)
	}
	b.tasks, b.raiseTasks = spare, "raise "+sysctl+" (sysctl -w; the lower of pid_max and threads-max binds) or lower --host-reserve-tasks"
	if cfg.HostPids > 0 {
		if cfg.HostPids > spare {
			return nil, fmt.Errorf("gvisor config: HostPids %d is above the %d host tasks this host spares for sandboxes: %w", cfg.HostPids, spare, errdefs.ErrInvalidArgument)
		}
		b.tasks, b.raiseTasks = cfg.HostPids, "raise the backend's HostPids option"
	}
	kb, ok := memTotalKB()
	if !ok {
		return nil, errors.New("gvisor: host memory: no MemTotal in /proc/meminfo")
	}
	total := kb << 10
	reserveMem := cfg.ReserveMemory
	if reserveMem == 0 {
		reserveMem = defaultReserveMemory(total)
	}
	spareMem := total - reserveMem
	if spareMem <= 0 {
		return nil, fmt.Errorf("gvisor config: the host keeps %d MiB (ReserveMemory) of its %d MiB: none left for sandboxes: %w", reserveMem>>20, total>>20, errdefs.ErrInvalidArgument)
	}
	// Page-aligned: the kernel rounds a memory limit down to pages.
	b.memory, b.raiseMemory = spareMem&^4095, "add memory or lower --host-reserve-memory"
	if cfg.HostMemory > 0 {
		if cfg.HostMemory > spareMem {
			return nil, fmt.Errorf("gvisor config: HostMemory %d MiB is above the %d MiB this host spares for sandboxes: %w", cfg.HostMemory>>20, spareMem>>20, errdefs.ErrInvalidArgument)
		}
		b.memory, b.raiseMemory = cfg.HostMemory&^4095, "raise the backend's HostMemory option"
	}
	return b, nil
}

// memTotalKB reads MemTotal from /proc/meminfo.
func memTotalKB() (int64, bool) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// reservationGrace is how long a reservation without its cgroup counts:
// longer than any runsc create takes. An older one is a create that died
// midway, and is removed.
const reservationGrace = 2 * time.Minute

// reservation is a create in flight: its cgroup, and the host limits it
// will get.
type reservation struct {
	Cgroup string `json:"cgroup"`
	Pids   int64  `json:"pids"`
	Memory int64  `json:"memory,omitempty"`
}

// reserve admits a sandbox of cgroup rel whose host limits are pids tasks
// and memory bytes, or fails with errdefs.ErrResourceExhausted naming the
// budget that binds and what lifts it. The caller calls release once
// runsc has made the cgroup (which then carries the reservation) or the
// create failed.
func (b *hostBudget) reserve(rel string, pids, memory int64) (release func(), err error) {
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return nil, fmt.Errorf("host budget: %w", err)
	}
	unlock, err := lockFile(filepath.Join(b.dir, ".lock"))
	if err != nil {
		return nil, fmt.Errorf("host budget: %w", err)
	}
	defer unlock()
	u, err := b.use()
	if err != nil {
		return nil, fmt.Errorf("host budget: %w", err)
	}
	tasksBound, memBound := int64(b.overcommit*float64(b.tasks)), int64(b.overcommit*float64(b.memory))
	switch {
	case u.tasks+startTasks+pids > b.tasks:
		return nil, fmt.Errorf("host process budget: the sandboxes hold %d host tasks and this one may reach %d, above the %d this host spares for sandboxes "+
			"(kernel.pid_max and kernel.threads-max less what the host keeps); stop sandboxes, ask for fewer pids (tupper serve --pids), or %s: %w",
			u.tasks, pids, b.tasks, b.raiseTasks, errdefs.ErrResourceExhausted)
	case u.memory+startMemory+memory > b.memory:
		return nil, fmt.Errorf("host memory budget: the sandboxes use %d MiB and this one may reach %d MiB, above the %d MiB this host spares for sandboxes; "+
			"stop sandboxes, ask for less memory (tupper serve --memory), or %s: %w",
			u.memory>>20, memory>>20, b.memory>>20, b.raiseMemory, errdefs.ErrResourceExhausted)
	case u.tasksLimits+pids > tasksBound:
		return nil, fmt.Errorf("host process budget: the sandboxes' host task limits add up to %d, and this one's %d would pass %g times the %d this host spares "+
			"(tupper serve --overcommit); stop sandboxes, ask for fewer pids (tupper serve --pids), or raise --overcommit: %w",
			u.tasksLimits, pids, b.overcommit, b.tasks, errdefs.ErrResourceExhausted)
	case u.memoryLimits+memory > memBound:
		return nil, fmt.Errorf("host memory budget: the sandboxes' host memory limits add up to %d MiB, and this one's %d MiB would pass %g times the %d MiB this host spares "+
			"(tupper serve --overcommit); stop sandboxes, ask for less memory (tupper serve --memory), or raise --overcommit: %w",
			u.memoryLimits>>20, memory>>20, b.overcommit, b.memory>>20, errdefs.ErrResourceExhausted)
	}
	file := filepath.Join(b.dir, url.PathEscape(rel)+".json")
	data, _ := json.Marshal(reservation{Cgroup: rel, Pids: pids, Memory: memory})
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return nil, fmt.Errorf("host budget: %w", err)
	}
	return func() { os.Remove(file) }, nil
}

// hostUse is what the sandboxes under the parent use and may use.
type hostUse struct {
	tasks, memory             int64 // in use now, creates in flight counted at their start
	tasksLimits, memoryLimits int64 // their host limits, added up
}

// use reads the sandboxes' use: each cgroup's pids.current and pids.max,
// its memory less its page cache and its memory limit, and each fresh
// reservation whose cgroup runsc has not made yet. Stale reservations are
// removed.
func (b *hostBudget) use() (hostUse, error) {
	var u hostUse
	pidsRoot, err := controllerHierarchy("pids")
	if err != nil {
		return u, err
	}
	memRoot, memErr := controllerHierarchy("memory")
	seen := map[string]bool{}
	entries, err := os.ReadDir(filepath.Join(pidsRoot, b.parent))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return u, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		d := filepath.Join(pidsRoot, b.parent, e.Name())
		cur, err := readPids(d, "pids.current")
		if err != nil {
			continue // gone meanwhile
		}
		limit, err := readPids(d, "pids.max")
		if err != nil || limit < 0 {
			limit = cur
		}
		u.tasks += cur
		u.tasksLimits += limit
		if memErr == nil {
			md := filepath.Join(memRoot, b.parent, e.Name())
			u.memory += workingSet(md)
			u.memoryLimits += memoryLimit(md)
		}
		seen[filepath.Join("/", b.parent, e.Name())] = true
	}
	files, err := filepath.Glob(filepath.Join(b.dir, "*.json"))
	if err != nil {
		return u, err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		var r reservation
		if err == nil {
			err = json.Unmarshal(data, &r)
		}
		if err == nil && path.Dir(r.Cgroup) != path.Join("/", b.parent) {
			continue // another parent's, with a budget of its own
		}
		fi, serr := os.Stat(f)
		switch {
		case err == nil && seen[r.Cgroup]:
			// Counted with its cgroup.
		case err != nil || serr != nil || time.Since(fi.ModTime()) > reservationGrace:
			os.Remove(f)
		default:
			u.tasks += startTasks
			u.memory += startMemory
			u.tasksLimits += r.Pids
			u.memoryLimits += r.Memory
		}
	}
	return u, nil
}

// workingSet is what the memory cgroup at dir uses less the page cache
// the kernel can reclaim (what kubelet calls the working set); 0 for a
// cgroup gone meanwhile.
func workingSet(dir string) int64 {
	u, err := readPids(dir, "memory.usage_in_bytes")
	if err != nil {
		if u, err = readPids(dir, "memory.current"); err != nil {
			return 0
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return u
	}
	for line := range strings.Lines(string(data)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		if k == "active_file" || k == "inactive_file" {
			n, _ := strconv.ParseInt(v, 10, 64)
			u -= n
		}
	}
	return max(u, 0)
}

// memoryLimit is the memory cgroup at dir's limit, 0 when it has none.
func memoryLimit(dir string) int64 {
	for _, f := range []string{"memory.limit_in_bytes", "memory.max"} {
		if n, err := readPids(dir, f); err == nil {
			if n < 0 || n >= 1<<62 {
				return 0 // "max", or v1's page-rounded "unlimited"
			}
			return n
		}
	}
	return 0
}

// limitParent sets the parent cgroup's pids.max and memory limit to the
// budget, on v1's hierarchies or the unified one of v2, where the parent
// exists. The kernel then keeps the host's reserve whatever the sandboxes
// under it do. A memory limit the parent's use is above already is left
// for the next start to set.
//
// Past the parent's memory limit the kernel's OOM killer ends sandboxes
// (their sentries are the largest processes) until memory comes back; as
// a sentry's memory returns only once its stub processes are gone too,
// it may end several before it does (of four sandboxes that filled the
// parent together, it ended two, or all four within 110 ms: measured). A guard that turned the
// kernel's killer off for the parent and ended the largest sandbox itself
// did little better (three of four): a charge that fails in a system call
// ends a waiting sentry all the same. The host and the daemon keep their
// share either way.
func (b *hostBudget) limitParent() error {
	var errs []error
	if root, err := controllerHierarchy("pids"); err == nil {
		if f := filepath.Join(root, b.parent, "pids.max"); exists(f) {
			errs = append(errs, os.WriteFile(f, []byte(strconv.FormatInt(b.tasks, 10)), 0))
		}
	}
	if root, err := controllerHierarchy("memory"); err == nil {
		for _, name := range []string{"memory.limit_in_bytes", "memory.max"} {
			if f := filepath.Join(root, b.parent, name); exists(f) {
				errs = append(errs, os.WriteFile(f, []byte(strconv.FormatInt(b.memory, 10)), 0))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// readPids reads a cgroup file of one number (pids.max, pids.current,
// memory.usage_in_bytes...); "max" is -1.
func readPids(dir, name string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// controllerHierarchy returns the mount point of the cgroup hierarchy that
// has controller name: v1's hierarchy of it, else the unified v2 one.
func controllerHierarchy(name string) (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	var unified string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+3 >= len(fields) {
			continue
		}
		mountPoint := oci.UnescapeMountPath(fields[4])
		switch fields[sep+1] {
		case "cgroup":
			if slices.Contains(strings.Split(fields[sep+3], ","), name) {
				return mountPoint, nil
			}
		case "cgroup2":
			if unified == "" {
				unified = mountPoint
			}
		}
	}
	if unified != "" {
		return unified, nil
	}
	return "", fmt.Errorf("no cgroup hierarchy with the %s controller is mounted", name)
}

// lockFile takes an exclusive flock on path, made if missing.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
