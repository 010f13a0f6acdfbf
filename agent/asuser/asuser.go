// Package asuser runs the agent's file operations with the credentials of
// the sandbox user they are done for, so that the kernel (gVisor's, inside a
// sandbox) decides what that user may touch: a request as `user` reads,
// creates, changes and removes exactly what a process of `user` could, and
// a link that code of `user` planted leads nowhere that user could not go
// already.
//
// The agent runs as root, and a process's credentials belong to each of its
// threads. Do locks the calling goroutine to its OS thread
// (runtime.LockOSThread), switches that thread's effective user, effective
// group and supplementary groups with raw per-thread system calls, runs the
// function, switches back and only then unlocks: no other goroutine ever
// runs on a thread while it holds a user's credentials. syscall.Setuid and
// friends are no use here: Go applies them to every thread of the process.
// setfsuid(2) would be the narrower tool, but gVisor does not implement it.
// Should switching back ever fail, the thread stays locked to its goroutine
// and ends with it, as Go ends every thread whose goroutine exits locked.
//
// Only the effective ids change: the real and saved ids stay root's. The
// kernel then clears the thread's effective capabilities, so every
// permission check is the user's, while processes of that user still cannot
// signal, trace or read the agent through the thread: those checks compare
// the target's real and saved ids, which are not theirs. The same real and
// saved ids let the thread become root again.
//
// Switching in place costs seven system calls and no hand-over between
// threads. A pool of threads kept per user, tried first, measured no
// faster (BenchmarkFilesAsUser) and needed idle timers and a goroutine
// hand-over per call.
package asuser

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"

	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
)

// Do runs fn with u's credentials: its file system calls are checked
// against u's user, group and supplementary groups, with none of root's
// capabilities, and what it creates belongs to u (and to u's group, unless
// a set-group-ID directory says otherwise). When the calling thread already
// has u's user and group (the agent runs as u, root for root, or Do calls
// itself for the same user), fn simply runs.
//
// fn runs on the calling goroutine, locked to its thread; only fn's own
// system calls carry u's credentials, not those of goroutines it starts. fn
// must not call runtime.UnlockOSThread. Panics and runtime.Goexit pass
// through, after the thread has switched back.
//
// Do is safe for concurrent use. It fails only when the thread cannot take
// u's credentials: the agent is not root, or Do is called for another user
// from inside Do; the error wraps errdefs.ErrPermissionDenied then.
func Do(u *identity.User, fn func() error) error {
	want := credOf(u)
	// Geteuid and Getegid ask about the calling thread: inside Do they
	// answer with the user's ids, on any other thread with the agent's.
	euid := uint32(os.Geteuid())
	if euid == want.uid && uint32(os.Getegid()) == want.gid {
		return fn()
	}
	self, err := agentCreds()
	switch {
	case err != nil:
	case self.uid != 0:
		err = fmt.Errorf("the agent runs as uid %d, not root: %w", self.uid, errdefs.ErrPermissionDenied)
	case euid != self.uid:
		err = fmt.Errorf("the thread already acts as uid %d: %w", euid, errdefs.ErrPermissionDenied)
	}
	if err != nil {
		return fmt.Errorf("act as user %q (uid %d): %w", u.Name, u.UID, err)
	}
	runtime.LockOSThread()
	if err := become(want); err != nil {
		// A partial switch must not reach other goroutines.
		if rerr := restore(self); rerr != nil {
			return fmt.Errorf("act as user %q (uid %d): %w (and switching back failed: %v; the thread ends with its goroutine)", u.Name, u.UID, err, rerr)
		}
		runtime.UnlockOSThread()
		return fmt.Errorf("act as user %q (uid %d): %w", u.Name, u.UID, err)
	}
	defer func() {
		if err := restore(self); err != nil {
			// Stay locked: the thread is never handed to another
			// goroutine and ends when this one does.
			return
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// agentCreds returns the credentials of the agent's own threads, read once
// (before any Do switches a thread; Do reads them only on a thread that has
// the agent's effective user).
var agentCreds = sync.OnceValues(current)

// cred is a set of credentials a thread can take.
type cred struct {
	uid, gid uint32
	groups   []uint32
}

func credOf(u *identity.User) cred {
	groups := slices.Clone(u.Groups)
	slices.Sort(groups)
	return cred{uid: u.UID, gid: u.GID, groups: slices.Compact(groups)}
}
