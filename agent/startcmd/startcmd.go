// Package startcmd runs a template's start command and its ready check in
// the sandbox, as E2B does with a template's setStartCmd and setReadyCmd:
// the start command once, at the agent's start, as a process like any
// command of a client (listed, tagged Tag, open to Connect and signals),
// and the ready check again and again until it exits 0. GET /health says
// where that stands (Health), and the engine's create waits for it.
//
// A paused, snapshotted or forked sandbox is restored with its agent, which
// is past all this: nothing runs twice.
package startcmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lightbearco/tupper/agent/process"
	pb "github.com/lightbearco/tupper/proto/process"
)

// Tag is the process tag of the start command, by which clients find it.
const Tag = "start-cmd"

// Defaults of Config.
const (
	// DefaultInterval is the pause between two tries of the ready check.
	DefaultInterval = 200 * time.Millisecond
	// DefaultTryTimeout bounds one try: a check that hangs is killed and
	// tried again. E2B's waitForTimeout(ms) is a check that sleeps that
	// long, so the bound must exceed the waits templates ask for; the
	// engine's boot timeout bounds all tries together.
	DefaultTryTimeout = 30 * time.Second
)

// Bounds of the output kept for messages.
const (
	outputTail   = 2 << 10 // of the start command
	tryOutputMax = 512     // of the last try of the ready check
)

// Config describes a start command and its ready check.
type Config struct {
	// Cmd is the start command, run with bash -l -c; empty for none.
	Cmd string
	// Ready is the ready check, run with bash -l -c; empty means ready
	// as soon as Cmd has started (with neither, ready at once).
	Ready string
	// User runs both; empty means the process service's default user.
	User string
	// Dir is where both run; empty means User's home.
	Dir string
	// Procs is the agent's process service, which runs both.
	Procs *process.Service
	// Logger receives the runner's logs and, line by line, the start
	// command's output; nil means slog.Default().
	Logger *slog.Logger
	// Interval is the pause between tries of the check; zero means
	// DefaultInterval. TryTimeout bounds one try; zero means
	// DefaultTryTimeout.
	Interval   time.Duration
	TryTimeout time.Duration
}

// Validate fills defaults and checks the configuration.
func (c *Config) Validate() error {
	if c.Procs == nil {
		return errors.New("startcmd: no process service")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.TryTimeout <= 0 {
		c.TryTimeout = DefaultTryTimeout
	}
	return nil
}

// State is where a start command stands.
type State int

const (
	// Waiting: the ready check has not passed yet.
	Waiting State = iota
	// Ready: the check passed (or there is none and the command started).
	Ready
	// Failed: it never will be. The start command could not start, or it
	// ended and the ready check failed after that.
	Failed
)

func (s State) String() string {
	switch s {
	case Waiting:
		return "waiting"
	case Ready:
		return "ready"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Status is a snapshot of a Runner.
type Status struct {
	State State
	// Message says, while Waiting, what the sandbox waits for and, once
	// Failed, why; it names the commands and ends with the tail of the
	// start command's output. Empty once Ready.
	Message string
	// Pid is the start command's pid, 0 when it did not start.
	Pid uint32
	// Exit is how the start command ended, nil while it runs.
	Exit *pb.ProcessEvent_EndEvent
	// Output is the tail of the start command's output.
	Output string
}

// Runner runs one start command and its check. It is safe for concurrent
// use.
type Runner struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	state    State
	failure  string // why it failed, once Failed
	pid      uint32
	exit     *pb.ProcessEvent_EndEvent
	exited   chan struct{} // closed once exit is set
	output   []byte        // the last outputTail bytes of the start command's output
	tries    int
	lastTry  string // how the last try of the check ended
	launched bool
}

// Start starts cfg's command and, in the background, its ready check, and
// returns at once. A start command that cannot start is no error here: the
// Runner is Failed, and says why.
func Start(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, log: cfg.Logger.With("op", "start-cmd"), exited: make(chan struct{})}
	if cfg.Cmd != "" {
		if err := r.launch(); err != nil {
			r.log.Error("start command did not start", "user", cfg.User, "dir", cfg.Dir, "err", err)
			r.mu.Lock()
			r.state, r.failure = Failed, fmt.Sprintf("the start command %s could not start%s: %v", quote(cfg.Cmd), r.who(), err)
			r.mu.Unlock()
			return r, nil
		}
	}
	if cfg.Ready == "" {
		r.setReady()
		return r, nil
	}
	go r.check()
	return r, nil
}

// launch starts the start command as a listed process, its output going
// to the log line by line.
func (r *Runner) launch() error {
	stdin := false
	req := &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", r.cfg.Cmd}},
		Tag:     ptr(Tag),
		Stdin:   &stdin,
	}
	if r.cfg.Dir != "" {
		req.Process.Cwd = ptr(r.cfg.Dir)
	}
	lines := newLineLogger(r.cfg.Logger)
	// Launch's events come from one goroutine, after it returns the pid.
	pid, err := r.cfg.Procs.Launch(r.cfg.User, req, func(ev *pb.ProcessEvent) {
		if d := ev.GetData(); d != nil {
			lines.write(d)
			r.mu.Lock()
			r.output = appendTail(r.output, outputTail, d.GetStdout(), d.GetStderr(), d.GetPty())
			r.mu.Unlock()
		}
		if end := ev.GetEnd(); end != nil {
			lines.flush()
			r.log.Info("start command ended", "status", end.GetStatus())
			r.mu.Lock()
			r.exit = end
			close(r.exited)
			r.mu.Unlock()
		}
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.pid, r.launched = pid, true
	r.mu.Unlock()
	r.log.Info("start command started", "pid", pid, "user", r.cfg.User, "dir", r.cfg.Dir)
	return nil
}

// check runs the ready check until it passes, or until a try that began
// after the start command ended fails: the command is gone, so nothing can
// change the answer any more.
func (r *Runner) check() {
	req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", r.cfg.Ready}}}
	if r.cfg.Dir != "" {
		req.Process.Cwd = ptr(r.cfg.Dir)
	}
	for {
		ended := r.startEnded()
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.TryTimeout)
		end, out, err := r.cfg.Procs.Run(ctx, r.cfg.User, req, tryOutputMax)
		cancel()
		if err == nil && end.GetExited() && end.GetExitCode() == 0 {
			r.setReady()
			return
		}
		r.noteTry(end, out, err)
		if ended {
			r.mu.Lock()
			r.state = Failed
			r.failure = fmt.Sprintf("the start command %s ended (%s) before the ready check %s passed, and the check then failed (%s)",
				quote(r.cfg.Cmd), r.exit.GetStatus(), quote(r.cfg.Ready), r.lastTry)
			r.mu.Unlock()
			r.log.Error("start command failed", "err", r.Status().Message)
			return
		}
		select {
		case <-time.After(r.cfg.Interval):
		case <-r.exited:
			// Try once more at once: the answer is final now.
		}
	}
}

// startEnded reports whether the start command has ended. Without one it
// never does, and the check runs until it passes.
func (r *Runner) startEnded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exit != nil
}

func (r *Runner) noteTry(end *pb.ProcessEvent_EndEvent, out []byte, err error) {
	var how string
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		how = fmt.Sprintf("killed after %v", r.cfg.TryTimeout)
	case end == nil:
		how = fmt.Sprintf("did not run: %v", err)
	default:
		how = end.GetStatus()
	}
	if s := cleanOutput(out); s != "" {
		how += fmt.Sprintf(", output %q", s)
	}
	r.mu.Lock()
	r.tries++
	r.lastTry = how
	r.mu.Unlock()
}

func (r *Runner) setReady() {
	r.mu.Lock()
	r.state = Ready
	tries := r.tries + 1
	r.mu.Unlock()
	if r.cfg.Ready == "" {
		r.log.Info("ready: no ready check")
	} else {
		r.log.Info("ready: the ready check passed", "tries", tries)
	}
}

// Status returns where the start command stands.
func (r *Runner) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{State: r.state, Pid: r.pid, Exit: r.exit, Output: cleanOutput(r.output)}
	switch r.state {
	case Failed:
		st.Message = r.failure
	case Waiting:
		st.Message = fmt.Sprintf("waiting for the ready check %s to pass", quote(r.cfg.Ready))
		if r.tries > 0 {
			st.Message += fmt.Sprintf(" (%d tries so far, the last: %s)", r.tries, r.lastTry)
		}
		switch {
		case r.cfg.Cmd == "":
		case r.exit != nil:
			st.Message += fmt.Sprintf("; the start command %s ended (%s)", quote(r.cfg.Cmd), r.exit.GetStatus())
		default:
			st.Message += fmt.Sprintf("; the start command %s runs as pid %d", quote(r.cfg.Cmd), r.pid)
		}
	default:
		return st
	}
	if r.launched {
		if st.Output == "" {
			st.Message += "; it has written nothing"
		} else {
			st.Message += fmt.Sprintf("; its output ends with %q", st.Output)
		}
	}
	return st
}

// who says, for messages, as whom and where the commands run.
func (r *Runner) who() string {
	s := ""
	if r.cfg.User != "" {
		s += fmt.Sprintf(" as user %q", r.cfg.User)
	}
	if r.cfg.Dir != "" {
		s += fmt.Sprintf(" in %q", r.cfg.Dir)
	}
	return s
}

func ptr[T any](v T) *T { return &v }
