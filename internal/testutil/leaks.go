package testutil

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// Leaks says where to look for what a Tupper state directory's sandboxes
// may leave on the host.
type Leaks struct {
	// Root is the state directory: processes whose command line names it,
	// mounts below it and host interfaces whose alias names it count.
	Root string
	// Baseline holds the paths below StateDir that may stay (from Tree,
	// taken before the sandboxes under test were made); nil skips the
	// file check.
	Baseline map[string]bool
	// StateDir is the directory whose files are checked against Baseline;
	// empty means Root/backends.
	StateDir string
	// ImageRoot is the image store's root: leases of IDs there count.
	ImageRoot string
	// IDs are the sandboxes that must be gone: their cgroups, their image
	// leases and any file below StateDir that names them count, even
	// when in Baseline.
	IDs []string
	// HostIfs are host interface names that must be gone: the interfaces
	// and their nftables chains in Tupper's table count.
	HostIfs []string
	// Keep are the ids of sandboxes that still run: a finding that names
	// one does not count.
	Keep []string
	// IgnorePIDs are processes that may name Root (a daemon that still
	// runs).
	IgnorePIDs []int
}

// Leftovers lists what the host still holds of the sandboxes that l
// describes: processes, mounts, interfaces, nftables chains, cgroups,
// image leases and state files, one finding a line.
func Leftovers(t testing.TB, l Leaks) []string {
	t.Helper()
	root := filepath.Clean(l.Root)
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if pid == os.Getpid() || slices.Contains(l.IgnorePIDs, pid) {
			continue
		}
		b, err := os.ReadFile(p)
		if err == nil && names(string(b), root) {
			found = append(found, "process "+strconv.Itoa(pid)+": "+strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " "))
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			if names(line, root) {
				found = append(found, "mount: "+line)
			}
		}
	}
	links, err := netlink.LinkList()
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		t.Fatalf("list interfaces: %v", err)
	}
	for _, link := range links {
		a := link.Attrs()
		if names(a.Alias, root) || slices.Contains(l.HostIfs, a.Name) {
			found = append(found, "interface "+a.Name+" ("+a.Alias+")")
		}
	}
	found = append(found, nftChains(l.HostIfs)...)
	for _, id := range l.IDs {
		for _, pattern := range []string{"/sys/fs/cgroup/*/tupper/" + id, "/sys/fs/cgroup/tupper/" + id} {
			m, _ := filepath.Glob(pattern)
			for _, p := range m {
				found = append(found, "cgroup "+p)
			}
		}
		if l.ImageRoot != "" {
			// A lease's holder is the engine's prefix and the id.
			m, _ := filepath.Glob(filepath.Join(l.ImageRoot, "leases", "*"+id))
			for _, p := range m {
				found = append(found, "image lease "+p)
			}
		}
	}
	if l.Baseline != nil {
		dir := l.StateDir
		if dir == "" {
			dir = filepath.Join(root, "backends")
		}
		for p := range Tree(t, dir) {
			if !l.Baseline[p] || slices.ContainsFunc(l.IDs, func(id string) bool { return strings.Contains(p, id) }) {
				found = append(found, "file "+p)
			}
		}
	}
	found = slices.DeleteFunc(found, func(f string) bool {
		return slices.ContainsFunc(l.Keep, func(id string) bool { return id != "" && strings.Contains(f, id) })
	})
	slices.Sort(found)
	return found
}

// names reports whether s names the path dir or a path below it: dir
// followed by a slash, a separator or nothing (so /tmp/te-1 does not match
// /tmp/te-12).
func names(s, dir string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], dir)
		if j < 0 {
			return false
		}
		end := i + j + len(dir)
		if end == len(s) || strings.ContainsRune("/\x00 \t\n", rune(s[end])) {
			return true
		}
		i = i + j + 1
	}
}

// nftChains lists the chains of Tupper's nftables table (inet tupper)
// that name one of hostIfs. It finds nothing where nft is missing.
func nftChains(hostIfs []string) []string {
	if len(hostIfs) == 0 {
		return nil
	}
	nft, err := exec.LookPath("nft")
	if err != nil {
		return nil
	}
	out, err := exec.Command(nft, "list", "chains", "inet").Output()
	if err != nil {
		return nil
	}
	var found []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	table := ""
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[0] == "table":
			table = f[2]
		case len(f) >= 2 && f[0] == "chain" && table == "tupper":
			name := f[1]
			if _, hostIf, ok := strings.Cut(name, "_"); ok && slices.Contains(hostIfs, hostIf) {
				found = append(found, "nftables chain inet tupper "+name)
			}
		}
	}
	return found
}

// Tree lists every path below dir, dir included.
func Tree(t testing.TB, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			out[p] = true
		}
		return nil
	})
	return out
}
