// Package asuser runs the agent's file operations with the credentials of
// the sandbox user they are done for, so that the kernel (gVisor's, inside a
// sandbox) decides what that user may touch: a request as `user` reads,
// creates, changes and removes exactly what a process of `user` could, and
// a link that code of `user` planted leads nowhere that user could not go
// already.
//
// The agent runs as root, and a process's credentials belong to each of its
// threads. Do runs a function on an OS thread of its own (runtime.LockOSThread)
// whose effective user, effective group and supplementary groups it has
// switched with raw per-thread system calls; no other goroutine ever runs on
// that thread, and the thread ends with its goroutine, never to serve
// another. syscall.Setuid and friends are no use here: Go applies them to
// every thread of the process. setfsuid(2) would be the narrower tool, but
// gVisor does not implement it.
//
// Only the effective ids change: the real and saved ids stay root's. The
// kernel then clears the thread's effective capabilities, so every
// permission check is the user's, while processes of that user still cannot
// signal, trace or read the agent through the thread: those checks compare
// the target's real and saved ids, which are not theirs.
package asuser

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lightbearco/tupper/agent/identity"
)

// idleTimeout is how long a thread with a user's credentials waits for more
// work before it ends. Requests come in bursts (an SDK writes many files, a
// listing follows a write), and starting a thread costs far more inside
// gVisor (about 2 ms) than handing work to a waiting one.
const idleTimeout = 30 * time.Second

// maxIdle bounds the idle threads kept for one set of credentials.
// Concurrent requests beyond it get threads that end after their work.
const maxIdle = 4

// Do runs fn with u's credentials: its file system calls are checked
// against u's user, group and supplementary groups, with none of root's
// capabilities, and what it creates belongs to u (and to u's group, unless
// a set-group-ID directory says otherwise). When the agent already runs as
// u (root for root), fn runs directly on the calling goroutine.
//
// fn runs on another goroutine, which Do waits for: only fn's own system
// calls carry u's credentials, not those of goroutines it starts. fn must
// not call runtime.UnlockOSThread. A panic in fn is raised again in Do's
// caller, and a runtime.Goexit in fn ends the caller's goroutine too.
//
// Do is safe for concurrent use. It fails only when the thread cannot take
// u's credentials (the agent is not root), with an error that says so.
func Do(u *identity.User, fn func() error) error {
	c := credOf(u)
	if c.isCurrent() {
		return fn()
	}
	w, err := workers.get(c)
	if err != nil {
		return fmt.Errorf("act as user %q (uid %d): %w", u.Name, u.UID, err)
	}
	res := w.do(fn)
	if res.exited {
		// The thread ended; it must not be handed out again.
		if res.goexit {
			runtime.Goexit()
		}
		panic(fmt.Sprintf("%v [recovered from a function run as user %q]\n%s", res.panicVal, u.Name, res.stack))
	}
	workers.put(w)
	return res.err
}

// cred is a set of credentials a thread can take.
type cred struct {
	uid, gid uint32
	groups   []uint32
	key      string // uid, gid and groups in one comparable string
}

func credOf(u *identity.User) cred {
	groups := slices.Clone(u.Groups)
	slices.Sort(groups)
	groups = slices.Compact(groups)
	var b strings.Builder
	fmt.Fprintf(&b, "%d:%d:", u.UID, u.GID)
	for i, g := range groups {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(g), 10))
	}
	return cred{uid: u.UID, gid: u.GID, groups: groups, key: b.String()}
}

// isCurrent reports whether the agent itself already has c's user and
// group, so no thread needs to change.
func (c cred) isCurrent() bool {
	return uint32(os.Geteuid()) == c.uid && uint32(os.Getegid()) == c.gid
}

// result is how one function run on a worker ended.
type result struct {
	err    error
	exited bool // the function panicked or called runtime.Goexit: the worker is gone
	goexit bool
	// panicVal and stack describe the panic when exited and not goexit.
	panicVal any
	stack    []byte
}

// worker is a goroutine locked to a thread that holds one set of
// credentials. It runs the functions sent to it one at a time.
type worker struct {
	cred cred
	jobs chan job
}

type job struct {
	fn   func() error
	done chan<- result
}

// start starts a worker for c and waits until its thread holds c.
func start(c cred) (*worker, error) {
	w := &worker{cred: c, jobs: make(chan job)}
	ready := make(chan error, 1)
	go w.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return w, nil
}

// loop is the worker's goroutine. It never unlocks its thread: when loop
// returns, the Go runtime ends the thread, and its credentials with it.
func (w *worker) loop(ready chan<- error) {
	runtime.LockOSThread()
	if err := setCreds(w.cred); err != nil {
		ready <- err
		return
	}
	ready <- nil
	idle := time.NewTimer(idleTimeout)
	defer idle.Stop()
	for {
		select {
		case j, ok := <-w.jobs:
			if !ok {
				return
			}
			if !w.run(j) {
				return
			}
			idle.Reset(idleTimeout)
		case <-idle.C:
			if workers.retire(w) {
				return
			}
			// A caller took this worker from the idle list and is about
			// to send it work.
			idle.Reset(idleTimeout)
		}
	}
}

// run runs one job and reports whether the worker may go on: false after a
// panic or runtime.Goexit, which the caller raises again.
func (w *worker) run(j job) (ok bool) {
	returned := false
	defer func() {
		if returned {
			return
		}
		v := recover()
		j.done <- result{exited: true, goexit: v == nil, panicVal: v, stack: debug.Stack()}
		// A Goexit goes on unwinding from here, ending the goroutine; a
		// recovered panic returns false and loop ends it.
	}()
	err := j.fn()
	returned = true
	j.done <- result{err: err}
	return true
}

// do runs fn on w and waits for it.
func (w *worker) do(fn func() error) result {
	done := make(chan result, 1)
	w.jobs <- job{fn: fn, done: done}
	return <-done
}

// pool holds idle workers by credentials. Workers that stay idle for
// idleTimeout retire themselves.
type pool struct {
	mu   sync.Mutex
	idle map[string][]*worker
}

var workers = &pool{idle: make(map[string][]*worker)}

// get returns an idle worker for c, or starts one.
func (p *pool) get(c cred) (*worker, error) {
	p.mu.Lock()
	if ws := p.idle[c.key]; len(ws) > 0 {
		w := ws[len(ws)-1]
		p.setIdle(c.key, ws[:len(ws)-1])
		p.mu.Unlock()
		return w, nil
	}
	p.mu.Unlock()
	return start(c)
}

// put returns w to the idle list, or ends it when the list is full.
func (p *pool) put(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := p.idle[w.cred.key]
	if len(ws) >= maxIdle {
		close(w.jobs)
		return
	}
	p.idle[w.cred.key] = append(ws, w)
}

// retire takes w off the idle list and reports whether it was there; when
// it was not, a caller has just taken it and w must stay.
func (p *pool) retire(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := p.idle[w.cred.key]
	i := slices.Index(ws, w)
	if i < 0 {
		return false
	}
	p.setIdle(w.cred.key, slices.Delete(ws, i, i+1))
	return true
}

func (p *pool) setIdle(key string, ws []*worker) {
	if len(ws) == 0 {
		delete(p.idle, key)
		return
	}
	p.idle[key] = ws
}

// idleCount returns how many idle workers hold credentials key (for tests).
func (p *pool) idleCount(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle[key])
}
