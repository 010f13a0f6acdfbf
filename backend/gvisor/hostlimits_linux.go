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

// hostPidBudget is how many host tasks all sandboxes together may hold:
// the host's task capacity less a quarter of it (at least 4096) kept for
// the host's own processes, the daemon's and the shell an operator needs
// to log in.
func hostPidBudget(capacity int64) int64 {
	return capacity - max(capacity/4, 4096)
}

// pidBudget admits sandboxes while the host tasks they may hold, all
// together, stay within the host's budget. What a sandbox may hold is
// its host cgroup's pids.max (hostPids), which the kernel enforces; so
// the sum of those over every sandbox under the cgroup parent, whichever
// daemon started it, must stay within the budget, and then no sandbox can
// take the tasks of another or of the host. The ledger is the cgroups
// themselves, read under a host-wide lock, plus a reservation file for
// each create between the check and the moment runsc makes its cgroup.
//
// The parent cgroup's own pids.max is set to the host's budget too: the
// kernel's backstop, should the ledger ever be wrong.
type pidBudget struct {
	dir    string // <SharedRoot>/pid-budget: the lock and the reservations
	parent string // the cgroup parent, "/tupper"
	total  int64  // the budget this backend admits against
	host   int64  // the budget derived from the kernel, for the parent's pids.max
	// raise says what lifts total: the kernel's sysctl that bounds it,
	// or the backend's option when that is lower.
	raise string
}

// newPidBudget returns cfg's budget: cfg.HostPids, or all the host
// spares (hostPidBudget) when it is zero. A HostPids above that fails
// with errdefs.ErrInvalidArgument.
func newPidBudget(cfg Config) (*pidBudget, error) {
	capacity, sysctl, err := hostTaskCapacity()
	if err != nil {
		return nil, fmt.Errorf("gvisor: host task capacity: %w", err)
	}
	b := &pidBudget{dir: filepath.Join(cfg.SharedRoot, "pid-budget"), parent: cfg.CgroupParent, host: hostPidBudget(capacity)}
	b.total, b.raise = b.host, "raise "+sysctl+" (sysctl -w; the lower of pid_max and threads-max binds)"
	if cfg.HostPids > 0 {
		if cfg.HostPids > b.host {
			return nil, fmt.Errorf("gvisor config: HostPids %d is above the %d host tasks this host spares for sandboxes: %w", cfg.HostPids, b.host, errdefs.ErrInvalidArgument)
		}
		b.total, b.raise = cfg.HostPids, "raise the backend's HostPids option"
	}
	return b, nil
}

// reservationGrace is how long a reservation without its cgroup counts:
// longer than any runsc create takes. An older one is a create that died
// midway, and is removed.
const reservationGrace = 2 * time.Minute

type reservation struct {
	Cgroup string `json:"cgroup"`
	Pids   int64  `json:"pids"`
}

// reserve admits a sandbox of cgroup rel that may hold pids host tasks,
// or fails with errdefs.ErrResourceExhausted. The caller calls release
// once runsc has made the cgroup (which then carries the reservation) or
// the create failed.
func (b *pidBudget) reserve(rel string, pids int64) (release func(), err error) {
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return nil, fmt.Errorf("pid budget: %w", err)
	}
	unlock, err := lockFile(filepath.Join(b.dir, ".lock"))
	if err != nil {
		return nil, fmt.Errorf("pid budget: %w", err)
	}
	defer unlock()
	used, err := b.used()
	if err != nil {
		return nil, fmt.Errorf("pid budget: %w", err)
	}
	if used+pids > b.total {
		return nil, fmt.Errorf("host process budget: the running sandboxes may hold %d host tasks and this one %d more, above the %d this host spares for sandboxes "+
			"(kernel.pid_max and kernel.threads-max less what the host keeps); stop sandboxes, ask for fewer pids (tupper serve --pids), or %s: %w",
			used, pids, b.total, b.raise, errdefs.ErrResourceExhausted)
	}
	file := filepath.Join(b.dir, url.PathEscape(rel)+".json")
	data, _ := json.Marshal(reservation{Cgroup: rel, Pids: pids})
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return nil, fmt.Errorf("pid budget: %w", err)
	}
	return func() { os.Remove(file) }, nil
}

// used sums what the sandboxes under the parent may hold: each cgroup's
// pids.max (its pids.current where it has no limit), and each fresh
// reservation whose cgroup runsc has not made yet. Stale reservations are
// removed.
func (b *pidBudget) used() (int64, error) {
	root, err := pidsHierarchy()
	if err != nil {
		return 0, err
	}
	var used int64
	seen := map[string]bool{}
	entries, err := os.ReadDir(filepath.Join(root, b.parent))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		d := filepath.Join(root, b.parent, e.Name())
		n, err := readPids(d, "pids.max")
		if err != nil {
			continue // gone meanwhile
		}
		if n < 0 {
			if n, err = readPids(d, "pids.current"); err != nil {
				continue
			}
		}
		used += n
		seen[filepath.Join("/", b.parent, e.Name())] = true
	}
	files, err := filepath.Glob(filepath.Join(b.dir, "*.json"))
	if err != nil {
		return 0, err
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
			used += r.Pids
		}
	}
	return used, nil
}

// limitParent sets the parent cgroup's pids.max to the host's budget, on
// the pids hierarchy of v1 or the unified one of v2, where the parent
// exists. The kernel then keeps the host's share whatever the sandboxes
// under it do.
func (b *pidBudget) limitParent() error {
	root, err := pidsHierarchy()
	if err != nil {
		return err
	}
	f := filepath.Join(root, b.parent, "pids.max")
	if !exists(f) {
		return nil
	}
	return os.WriteFile(f, []byte(strconv.FormatInt(b.host, 10)), 0)
}

// readPids reads a pids.max or pids.current file; "max" is -1.
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

// pidsHierarchy returns the mount point of the cgroup hierarchy that has
// the pids controller: v1's pids hierarchy, else the unified v2 one.
func pidsHierarchy() (string, error) {
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
			if slices.Contains(strings.Split(fields[sep+3], ","), "pids") {
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
	return "", errors.New("no cgroup hierarchy with the pids controller is mounted")
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
