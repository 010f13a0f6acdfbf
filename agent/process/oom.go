package process

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// oomMarkTTL bounds how long a mark waits for its process to be reaped
// here. A process that is not the agent's child is reaped by its own
// parent and never seen by the reaper; its mark must not outlive it into
// a process that later reuses its pid.
const oomMarkTTL = 10 * time.Second

type oomMark struct {
	reason string
	at     time.Time
}

var (
	oomMu    sync.Mutex
	oomMarks = map[int]oomMark{} // guarded by oomMu
)

// MarkOutOfMemory records that the sandbox's out-of-memory killer is about
// to kill pid with SIGKILL, and why (reason reads like "the sandbox's
// memory limit is 1024 MiB"). When pid is a process the service started,
// its end event then carries exit code 137 and says it ran out of memory
// (see endEvent). The mark is taken when the process is reaped, and
// forgotten after oomMarkTTL if the agent never reaps it. undo takes the
// mark back, for a kill that did not happen.
//
// It is safe for concurrent use.
func MarkOutOfMemory(pid int, reason string) (undo func()) {
	now := time.Now()
	oomMu.Lock()
	defer oomMu.Unlock()
	for p, m := range oomMarks {
		if now.Sub(m.at) > oomMarkTTL {
			delete(oomMarks, p)
		}
	}
	m := oomMark{reason: reason, at: now}
	oomMarks[pid] = m
	return func() {
		oomMu.Lock()
		defer oomMu.Unlock()
		if oomMarks[pid] == m {
			delete(oomMarks, pid)
		}
	}
}

// takeOOMMark removes pid's mark and returns its reason when the process
// ended by SIGKILL while the mark was fresh, and "" otherwise. Without a
// mark, a SIGKILL counts as an out-of-memory kill when the kernel's own
// OOM killer ended a process of the sandbox's cgroup since the last one it
// was charged to (see kernelOOM): that is how a sandbox whose limit the
// host kernel holds (a container, not gVisor) learns of it.
func takeOOMMark(pid int, ws syscall.WaitStatus) string {
	oomMu.Lock()
	m, ok := oomMarks[pid]
	delete(oomMarks, pid)
	oomMu.Unlock()
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return ""
	}
	if ok && time.Since(m.at) <= oomMarkTTL {
		return m.reason
	}
	return kernelOOM.take()
}

// onStart, when set, is called each time the service starts a process.
var onStart atomic.Pointer[func()]

// OnStart makes the service call f each time it starts a process: the
// sandbox's out-of-memory killer watches closely once something runs
// (oom.Watcher.Wake). It is safe for concurrent use.
func OnStart(f func()) { onStart.Store(&f) }

// kernelOOM counts the kernel's OOM kills in the sandbox's memory cgroup.
var kernelOOM = &oomCounter{root: "/sys/fs/cgroup"}

// oomCounter reads the oom_kill count of the memory cgroup mounted at root
// (cgroup v2's memory.events or v1's memory.oom_control) and charges each
// kill to one SIGKILLed process.
type oomCounter struct {
	root    string
	mu      sync.Mutex
	charged uint64 // kills already charged to a process
	primed  bool
}

// prime takes the kills counted so far as charged: they happened before
// this agent's processes did (in a cgroup that predates it, or the host's
// own when no sandbox cgroup is mounted).
func (c *oomCounter) prime() {
	n, _, _ := c.read()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.primed {
		c.charged, c.primed = n, true
	}
}

// take returns why the kernel killed a process when its kill count went up
// since the last kill charged, and "" otherwise.
func (c *oomCounter) take() string {
	n, limit, ok := c.read()
	if !ok {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.primed {
		// Not primed (a test): every kill counted is one to charge.
		c.primed = true
	}
	if n <= c.charged {
		return ""
	}
	c.charged++
	if limit > 0 {
		return fmt.Sprintf("the sandbox's memory limit is %d MiB", limit>>20)
	}
	return "the sandbox's memory limit"
}

// read returns the oom_kill count and the memory limit of the cgroup.
func (c *oomCounter) read() (kills, limit uint64, ok bool) {
	for _, f := range []struct{ events, limit string }{
		{"memory.events", "memory.max"},
		{"memory/memory.oom_control", "memory/memory.limit_in_bytes"},
	} {
		b, err := os.ReadFile(filepath.Join(c.root, f.events))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, found := strings.CutPrefix(line, "oom_kill "); found {
				kills, err = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, 0, false
				}
				if lb, err := os.ReadFile(filepath.Join(c.root, f.limit)); err == nil {
					limit, _ = strconv.ParseUint(strings.TrimSpace(string(lb)), 10, 64)
				}
				return kills, limit, true
			}
		}
	}
	return 0, 0, false
}
