package process

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The reaper collects the exit status of every child of the agent.
//
// The agent runs as PID 1 of its sandbox, so orphans of the commands it
// starts are re-parented to it and must be reaped, or they stay zombies.
// exec.Cmd.Wait cannot coexist with that: a wait4(-1) loop would steal the
// statuses Wait is blocked on. So processes are started with
// syscall.ForkExec through spawn, which registers a callback for the pid,
// and one goroutine, woken by SIGCHLD, reaps with wait4(WNOHANG) and
// hands each status to its callback.
//
// Two modes:
//   - all: wait4(-1) reaps every child, registered or not. The mode of
//     PID 1 and of a child subreaper (see Supervise), where orphans arrive.
//   - own: only registered pids are waited for. The mode of an ordinary
//     host process (tests, an agent run by hand), where other code in the
//     same binary may run and wait for its own children.
//
// Consequence for the agent binary: every child of the agent must be
// started through this package; anything else (os/exec) would lose its exit
// status to the reaper in mode all.
//
// Registration cannot race the reaper: spawn holds forkMu shared from
// fork until the callback is registered, and a reaping pass holds it
// exclusively, so a child that exits at once is only reaped once its pid
// is known.
type reaper struct {
	log *slog.Logger

	forkMu  sync.RWMutex
	all     bool // guarded by forkMu
	mu      sync.Mutex
	waiters map[int]func(exitStatus) // guarded by mu
}

var (
	reaperOnce sync.Once
	theReaper  *reaper
)

// getReaper starts the process-wide reaper on first use. SIGCHLD is
// subscribed to before the first fork, so no exit goes unnoticed.
func getReaper(log *slog.Logger) *reaper {
	reaperOnce.Do(func() {
		r := &reaper{log: log, waiters: make(map[int]func(exitStatus))}
		r.all = os.Getpid() == 1 || isSubreaper()
		sigc := make(chan os.Signal, 1)
		signal.Notify(sigc, syscall.SIGCHLD)
		go func() {
			for range sigc {
				r.reap()
			}
		}()
		theReaper = r
	})
	return theReaper
}

func isSubreaper() bool {
	var v int32
	// PR_GET_CHILD_SUBREAPER stores an int through its second argument.
	err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0)
	return err == nil && v != 0
}

// spawn forks and execs argv0 and registers onExit for the child, which
// the reaper calls (on its goroutine; it must not block) with how the
// child ended.
func (r *reaper) spawn(argv0 string, argv []string, attr *syscall.ProcAttr, onExit func(exitStatus)) (int, error) {
	r.forkMu.RLock()
	defer r.forkMu.RUnlock()
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err != nil {
		return 0, err
	}
	resetOOMScore(pid)
	r.mu.Lock()
	r.waiters[pid] = onExit
	r.mu.Unlock()
	return pid, nil
}

// reap collects every child that has exited. SIGCHLDs coalesce, so one
// pass collects all of them.
func (r *reaper) reap() {
	r.forkMu.Lock()
	defer r.forkMu.Unlock()
	if r.all {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				return
			}
			r.dispatch(pid, ws)
		}
	}
	r.mu.Lock()
	pids := make([]int, 0, len(r.waiters))
	for pid := range r.waiters {
		pids = append(pids, pid)
	}
	r.mu.Unlock()
	for _, pid := range pids {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		for err == syscall.EINTR {
			got, err = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
		switch {
		case got == pid:
			r.dispatch(pid, ws)
		case err == syscall.ECHILD:
			// Someone else in this binary waited for our child. Its status
			// is lost; report a failure rather than leave the process
			// running forever in our books.
			r.log.Error("exit status of a child was taken by other code", "pid", pid)
			r.dispatch(pid, syscall.WaitStatus(255<<8))
		}
	}
}

func (r *reaper) dispatch(pid int, ws syscall.WaitStatus) {
	// The mark goes with the process it was meant for, whoever waits for
	// it, before its pid can be reused.
	oom := takeOOMMark(pid, ws)
	r.mu.Lock()
	fn := r.waiters[pid]
	delete(r.waiters, pid)
	r.mu.Unlock()
	if fn == nil {
		r.log.Debug("reaped orphan", "pid", pid, "status", ws)
		return
	}
	fn(exitStatus{ws: ws, outOfMemory: oom})
}

// registered returns the pids still running.
func (r *reaper) registered() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	pids := make([]int, 0, len(r.waiters))
	for pid := range r.waiters {
		pids = append(pids, pid)
	}
	return pids
}

// Supervise prepares the calling process to supervise the commands the
// agent starts, and should run before anything else starts children.
// Outside PID 1 it makes the process a child subreaper (PR_SET_CHILD_SUBREAPER),
// so orphans of those commands come back to it as they would to PID 1,
// and either way it starts the reaper in the mode that reaps every child.
// Without it the reaper still works, lazily started in the mode that waits
// only for the processes this package started.
func Supervise(log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("become child subreaper: %w", err)
		}
	}
	r := getReaper(log)
	r.forkMu.Lock()
	r.all = true
	r.forkMu.Unlock()
	// Reap anything that exited before SIGCHLD was subscribed to.
	go r.reap()
	return nil
}

// Shutdown forwards sig to everything the agent started — as PID 1, to
// every process in the sandbox; otherwise to the process group of each
// process this package started — and waits for them to exit. Whatever is
// still running when ctx ends is killed with SIGKILL, and Shutdown waits
// one more second for it to go.
func Shutdown(ctx context.Context, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("signal %v is not a unix signal", sig)
	}
	r := getReaper(slog.Default())
	r.signalAll(s)
	if r.waitIdle(ctx) {
		return nil
	}
	r.signalAll(syscall.SIGKILL)
	kctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if r.waitIdle(kctx) {
		return nil
	}
	return fmt.Errorf("children still running after SIGKILL: %v", r.registered())
}

func (r *reaper) signalAll(sig syscall.Signal) {
	if os.Getpid() == 1 {
		// kill(-1) reaches every process but PID 1 itself: the whole sandbox.
		_ = syscall.Kill(-1, sig)
		return
	}
	for _, pid := range r.registered() {
		_ = killGroup(pid, sig)
	}
}

// waitIdle waits until no registered child is left (as PID 1: no child at
// all) or ctx ends, and reports whether it got there.
func (r *reaper) waitIdle(ctx context.Context) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if len(r.registered()) == 0 && (os.Getpid() != 1 || !hasChildren()) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// hasChildren reports whether the process has any child, exited or not,
// without reaping one.
func hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != unix.ECHILD
}

// killGroup sends sig to the process group pid leads. Processes are
// started in their own session, so their pid is their group's id.
func killGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if err == syscall.ESRCH {
		return nil // gone already; its end event follows
	}
	if err != nil {
		return fmt.Errorf("signal process group %d: %w", pid, err)
	}
	return nil
}

// agentShielded says whether the agent runs shielded from the kernel's
// OOM killer (an oom_score_adj below 0, which a container runtime sets for
// the sandbox's first process), read once.
var agentShielded = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && n < 0
})

// resetOOMScore gives child pid the ordinary oom_score_adj, 0, when the
// agent is shielded: the child inherited the shield, and the kernel's OOM
// killer must be able to end the sandbox's processes, never the agent.
func resetOOMScore(pid int) {
	if !agentShielded() {
		return
	}
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("0"), 0)
}
