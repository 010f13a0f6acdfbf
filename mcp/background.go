package mcp

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// Bounds of the background commands the server follows.
const (
	// maxRunningPerSandbox bounds the background commands followed at
	// once in one sandbox.
	maxRunningPerSandbox = 16
	// maxEnded bounds the ended commands whose output is kept for a last
	// command_output; the oldest is forgotten first.
	maxEnded = 64
	// bufferFactor times the output limit is how much of each stream of
	// a background command is kept: the newest bytes.
	bufferFactor = 4
)

// tailBuffer keeps the newest bytes written to it, up to a limit, and
// counts all of them, so that readers can page through it by offset. It
// is safe for concurrent use.
type tailBuffer struct {
	mu    sync.Mutex
	keep  int
	buf   []byte
	total int64 // bytes ever written; buf holds the last len(buf)
}

func (b *tailBuffer) Write(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(len(s))
	b.buf = append(b.buf, s...)
	// Trim by whole halves, not on every write, to keep appends cheap.
	if len(b.buf) > 2*b.keep {
		b.buf = append(b.buf[:0:0], b.buf[len(b.buf)-b.keep:]...)
	}
}

// read returns up to max bytes from offset on, the offset it really
// started from (later than asked when older bytes were dropped), and the
// total written so far.
func (b *tailBuffer) read(offset int64, max int) (data string, from, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	first := b.total - int64(len(b.buf))
	from = min(max64(offset, first), b.total)
	chunk := b.buf[from-first:]
	s := string(chunk)
	if len(s) > max {
		s = cutBefore(s, max)
	}
	return s, from, b.total
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// bgKey names a background command.
type bgKey struct {
	sandbox string
	pid     uint32
}

// bgCommand is a command the server follows: its output so far and, once
// it ended, how.
type bgCommand struct {
	key     bgKey
	command string
	started time.Time
	// attached is set for a process the server did not start but
	// attached to later: its output before that is unknown.
	attached bool
	stdout   *tailBuffer
	stderr   *tailBuffer
	handle   *sdk.CommandHandle
	done     chan struct{}
	elem     *list.Element // in backgroundSet.ended once ended

	// Set before done is closed.
	exitCode int
	errText  string
}

// ended reports whether the command has ended.
func (c *bgCommand) ended() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// backgroundSet is the set of background commands the server follows. It
// is safe for concurrent use.
type backgroundSet struct {
	keep int

	mu       sync.Mutex
	commands map[bgKey]*bgCommand
	ended    *list.List // of *bgCommand, oldest first
}

func newBackgroundSet(outputLimit int) *backgroundSet {
	return &backgroundSet{keep: bufferFactor * outputLimit, commands: map[bgKey]*bgCommand{}, ended: list.New()}
}

// errTooMany is returned when a sandbox runs too many background commands.
var errTooMany = fmt.Errorf("%d background commands are running in this sandbox already: end some with kill_command first: %w", maxRunningPerSandbox, errdefs.ErrResourceExhausted)

// prepare makes the buffers of a command about to start in sandbox, or
// fails when the sandbox runs too many.
func (s *backgroundSet) prepare(sandbox, command string) (*bgCommand, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	running := 0
	for k, c := range s.commands {
		if k.sandbox == sandbox && !c.ended() {
			running++
		}
	}
	if running >= maxRunningPerSandbox {
		return nil, errTooMany
	}
	return &bgCommand{
		command: command, started: time.Now(),
		stdout: &tailBuffer{keep: s.keep}, stderr: &tailBuffer{keep: s.keep},
		done: make(chan struct{}),
	}, nil
}

// follow records c, which runs as h, and waits in the background for it
// to end. A command of the same pid that ended before is replaced.
func (s *backgroundSet) follow(sandbox string, c *bgCommand, h *sdk.CommandHandle) {
	c.key, c.handle = bgKey{sandbox, h.PID()}, h
	s.mu.Lock()
	if old := s.commands[c.key]; old != nil && old.elem != nil {
		s.ended.Remove(old.elem)
	}
	s.commands[c.key] = c
	s.mu.Unlock()
	go s.wait(c)
}

func (s *backgroundSet) wait(c *bgCommand) {
	res, err := c.handle.Wait(context.Background())
	var exit *sdk.CommandExitError
	switch {
	case errors.As(err, &exit):
		c.exitCode, c.errText = exit.ExitCode, exit.CommandResult.Error
	case err != nil:
		c.exitCode, c.errText = -1, err.Error()
	case res != nil:
		c.exitCode, c.errText = res.ExitCode, res.Error
	}
	close(c.done)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.commands[c.key] != c {
		return
	}
	c.elem = s.ended.PushBack(c)
	for s.ended.Len() > maxEnded {
		old := s.ended.Remove(s.ended.Front()).(*bgCommand)
		if s.commands[old.key] == old {
			delete(s.commands, old.key)
		}
	}
}

// get returns the command of pid in sandbox, or nil.
func (s *backgroundSet) get(sandbox string, pid uint32) *bgCommand {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commands[bgKey{sandbox, pid}]
}

// forget drops every command of sandbox, disconnecting those that still
// run: the sandbox was killed.
func (s *backgroundSet) forget(sandbox string) {
	s.mu.Lock()
	var running []*bgCommand
	for k, c := range s.commands {
		if k.sandbox != sandbox {
			continue
		}
		delete(s.commands, k)
		if c.elem != nil {
			s.ended.Remove(c.elem)
		} else {
			running = append(running, c)
		}
	}
	s.mu.Unlock()
	for _, c := range running {
		c.handle.Disconnect()
	}
}
