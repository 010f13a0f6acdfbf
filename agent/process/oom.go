package process

import (
	"sync"
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
// ended by SIGKILL while the mark was fresh, and "" otherwise.
func takeOOMMark(pid int, ws syscall.WaitStatus) string {
	oomMu.Lock()
	m, ok := oomMarks[pid]
	delete(oomMarks, pid)
	oomMu.Unlock()
	if !ok || time.Since(m.at) > oomMarkTTL || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return ""
	}
	return m.reason
}
