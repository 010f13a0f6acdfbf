package engine

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// Admission control: a host boots only so many sandboxes at once before
// every boot slows down for all of them (each is a runsc process tree, a
// network namespace, an overlay and a wait for the agent), and holds only
// so many before memory or process ids run out. The engine therefore lets
// at most MaxCreating creates boot at once, keeps at most MaxQueued more
// waiting for a turn, for at most QueueWait, and refuses the rest at once
// with an errdefs.Busy error: 429 with Retry-After on the wire, which the
// E2B SDKs turn into a RateLimitError (or wait and retry). Everything else
// (list, get, kill, the data plane) never waits for admission.
//
// Turns are shared between teams: while another team has creates under
// way, one team's creates, booting and waiting together, may hold at most
// half of the turns and the queue (its share); and a team under its share
// may wait for a turn even when the queue is full of the creates of a team
// over its share. So a team that floods the server cannot keep another's
// creates out. A team runs at most MaxSandboxesPerTeam sandboxes.

// validateAdmission fills the admission defaults of c and checks them.
func (c *Config) validateAdmission() error {
	if c.MaxCreating < 0 || c.MaxQueued < 0 || c.QueueWait < 0 || c.MaxSandboxes < 0 {
		return fmt.Errorf("engine: MaxCreating, MaxQueued, QueueWait and MaxSandboxes must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	if c.MaxCreating == 0 {
		c.MaxCreating = 2 * runtime.NumCPU()
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = 4 * c.MaxCreating
	}
	if c.QueueWait == 0 {
		c.QueueWait = 20 * time.Second
	}
	if c.MaxSandboxes == 0 {
		c.MaxSandboxes = DefaultMaxSandboxes()
	}
	if c.MaxSandboxesPerTeam < 0 {
		return fmt.Errorf("engine: MaxSandboxesPerTeam must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	if c.MaxSandboxesPerTeam == 0 || c.MaxSandboxesPerTeam > c.MaxSandboxes {
		c.MaxSandboxesPerTeam = c.MaxSandboxes
	}
	return nil
}

// DefaultMaxSandboxes is the cap on live sandboxes when Config names none:
// what the host can hold idle, one per 64 MiB of its memory (an idle
// gVisor sandbox was measured at about 19 MiB of host memory, its memory
// cgroup's use; the rest is for what its programs use), and few enough
// that their host tasks stay within half of the kernel's task capacity.
// Which of them may start beyond that is the backend's to judge by what
// the others use (gVisor's host budget answers 429 when the host is full).
// It is at least 16.
func DefaultMaxSandboxes() int {
	byMemory := 1 << 20 // no limit known
	if kb, ok := memTotalKB(); ok {
		byMemory = int(kb / (64 << 10))
	}
	byTasks := 1 << 20
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		if b, err := os.ReadFile(f); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				// Half of the tasks for sandboxes, at hostTasksPerSandbox each.
				byTasks = min(byTasks, n/2/hostTasksPerSandbox)
			}
		}
	}
	return max(16, min(byMemory, byTasks))
}

// hostTasksPerSandbox is what a gVisor sandbox takes of the host's tasks
// (its sentry's threads, the gofer's, runsc's, the stubs of its
// processes): an idle one was measured at about 28; this leaves room for
// work.
const hostTasksPerSandbox = 80

// memTotalKB reads MemTotal from /proc/meminfo.
func memTotalKB() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// admission hands out turns to boot. It is safe for concurrent use.
type admission struct {
	turns chan struct{} // a token per create booting
	queue int           // most creates waiting
	wait  time.Duration // longest wait

	// share is the most creates one team may have booting and waiting.
	share int

	mu      sync.Mutex
	waiting int
	// inFlight counts each team's creates booting or waiting, and
	// booting those past admission, for the per-team cap.
	inFlight map[string]int
	booting  map[string]int
	// creating counts the creates past admission, for the live cap.
	creating int
	// took is a moving average of how long a create's turn lasts, for
	// telling refused clients when to come back.
	took time.Duration
}

func newAdmission(cfg *Config) *admission {
	return &admission{
		turns: make(chan struct{}, cfg.MaxCreating), queue: cfg.MaxQueued, wait: cfg.QueueWait, took: time.Second,
		share: max(1, (cfg.MaxCreating+cfg.MaxQueued+1)/2), inFlight: map[string]int{}, booting: map[string]int{},
	}
}

// retryAfter guesses when a turn will be free for a client refused now:
// the turns ahead of it, each as long as a create takes lately.
func (a *admission) retryAfter() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	ahead := time.Duration(a.waiting/cap(a.turns) + 1)
	return min(max(ahead*a.took, time.Second), 30*time.Second)
}

// admit waits for a turn to create a sandbox and returns the function that
// ends it. It refuses at once when MaxQueued creates wait already, and
// after QueueWait without a turn; a caller that goes away stops waiting.
// With a turn, a create that would take the engine past MaxSandboxes is
// refused too.
func (e *Engine) admit(ctx context.Context) (done func(), err error) {
	a := e.admission
	team := DefaultTeam
	if s, ok := ScopeFrom(ctx); ok {
		team = s.Team
	}
	a.mu.Lock()
	others, over := false, false
	for t, n := range a.inFlight {
		if t != team {
			others = true
			over = over || n > a.share
		}
	}
	if others && a.inFlight[team] >= a.share {
		a.mu.Unlock()
		after := a.retryAfter()
		return nil, errdefs.Busy(after, "create: your team has %d creates under way or waiting, its share of this busy server: retry in %v",
			a.share, after.Round(time.Second))
	}
	a.inFlight[team]++
	// Under its share while another team is over its own: this create
	// may wait beyond the queue's bound (by at most a share per team).
	overflow := over
	a.mu.Unlock()
	leave := func() {
		a.mu.Lock()
		if a.inFlight[team]--; a.inFlight[team] == 0 {
			delete(a.inFlight, team)
		}
		a.mu.Unlock()
	}
	defer func() {
		if err != nil {
			leave()
		}
	}()
	select {
	case a.turns <- struct{}{}:
	default:
		a.mu.Lock()
		if a.waiting >= a.queue && !overflow {
			a.mu.Unlock()
			after := a.retryAfter()
			return nil, errdefs.Busy(after, "create: this server is busy: %d creates are under way and %d more waiting, the most it takes: retry in %v",
				cap(a.turns), a.queue, after.Round(time.Second))
		}
		a.waiting++
		a.mu.Unlock()
		timer := time.NewTimer(a.wait)
		select {
		case a.turns <- struct{}{}:
			err = nil
		case <-timer.C:
			err = errdefs.Busy(a.retryAfter(), "create: this server is busy: no turn to create came within %v: retry later", a.wait)
		case <-ctx.Done():
			err = fmt.Errorf("create: gave up waiting for a turn: %w", context.Cause(ctx))
		}
		timer.Stop()
		a.mu.Lock()
		a.waiting--
		a.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	start := time.Now()
	a.mu.Lock()
	a.creating++
	a.booting[team]++
	creating, teamBooting := a.creating, a.booting[team]
	a.mu.Unlock()
	end := func() {
		a.mu.Lock()
		a.creating--
		if a.booting[team]--; a.booting[team] == 0 {
			delete(a.booting, team)
		}
		a.took = (3*a.took + time.Since(start)) / 4
		a.mu.Unlock()
		<-a.turns
	}
	e.mu.Lock()
	// Paused sandboxes hold no memory or CPU: they do not count.
	live, teamLive := 0, 0
	for _, l := range e.live {
		if l.rec.State == store.StatePaused {
			continue
		}
		live++
		if l.rec.Team == team {
			teamLive++
		}
	}
	e.mu.Unlock()
	if live+creating > e.cfg.MaxSandboxes {
		end()
		return nil, errdefs.Busy(10*time.Second, "create: this server runs %d sandboxes, its limit (tupper serve --max-sandboxes): kill some, or retry when others end", live)
	}
	// The team's creates under way count against its cap too.
	if teamLive+teamBooting > e.cfg.MaxSandboxesPerTeam {
		end()
		return nil, errdefs.Busy(10*time.Second, "create: your team runs %d sandboxes, its limit (tupper serve --max-sandboxes-per-team): kill some, or retry when others end", teamLive)
	}
	return func() { end(); leave() }, nil
}
