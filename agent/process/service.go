// Package process is the agent's envd Process service (shared/specs/e2b-wire.md
// §3): it starts commands as a chosen user, streams their output, lets
// clients re-attach to, feed, resize and signal them, and lists them.
//
// One file holds each RPC. Processes outlive the streams that started them;
// only their exit, a signal, or the deadline of the Start call that created
// them ends them. Children are started with fork/exec and reaped by a single
// SIGCHLD-driven reaper (reaper_linux.go), so the agent can run as PID 1 and
// collect orphans without racing per-process waits.
package process

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
	pb "github.com/lightbearco/tupper/proto/process"
	"github.com/lightbearco/tupper/proto/process/processconnect"
)

// Config configures a Service.
type Config struct {
	// DefaultUser is the account commands run as when a request names
	// none; empty means identity.DefaultUser.
	DefaultUser string
	// DefaultWorkdir is where commands run when a request names no
	// directory (a template's WORKDIR); empty, or a directory that does
	// not exist, means the user's home.
	DefaultWorkdir string
	// Env is the base environment ("KEY=value") of every command, beneath
	// the per-user variables and the request's own envs.
	Env []string
	// Logger receives the service's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate fills defaults and checks the configuration.
func (c *Config) Validate() error {
	if c.DefaultUser == "" {
		c.DefaultUser = identity.DefaultUser
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if strings.ContainsAny(c.DefaultUser, ":/ ") {
		return fmt.Errorf("process: default user %q: %w", c.DefaultUser, errdefs.ErrInvalidArgument)
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("process: base env entry %q is not KEY=value: %w", kv, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// Service implements processconnect.ProcessHandler. It is safe for
// concurrent use; the processes it starts belong to it until they end.
type Service struct {
	cfg Config
	log *slog.Logger
	// env is the base environment of the commands to come: cfg.Env, and
	// what AddEnv added since.
	env atomic.Pointer[[]string]

	mu    sync.Mutex
	procs map[uint32]*handle // running processes by pid
	seq   uint64             // start order, to pick the newest of equal tags
}

var _ processconnect.ProcessHandler = (*Service)(nil)

// New returns a Service for cfg.
func New(cfg Config) (*Service, error) {
	kernelOOM.prime()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: cfg.Logger, procs: make(map[uint32]*handle)}
	env := slices.Clone(cfg.Env)
	s.env.Store(&env)
	return s, nil
}

// AddEnv sets vars in the base environment of the commands started from
// now on, replacing those of the same names (a sandbox handed out from a
// warm pool gets its create's environment so).
func (s *Service) AddEnv(vars map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	env := slices.DeleteFunc(slices.Clone(*s.env.Load()), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		_, replaced := vars[k]
		return replaced
	})
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env = append(env, k+"="+vars[k])
	}
	s.env.Store(&env)
}

// add records a freshly started process.
func (s *Service) add(h *handle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	h.seq = s.seq
	s.procs[h.pid] = h
}

// remove forgets h once it has ended. The pid may already name a newer
// process (the kernel reuses pids), which must stay.
func (s *Service) remove(h *handle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.procs[h.pid] == h {
		delete(s.procs, h.pid)
	}
}

// lookup finds the running process sel names: by pid, or by tag (the most
// recently started process carrying it).
func (s *Service) lookup(sel *pb.ProcessSelector) (*handle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if h, ok := s.procs[v.Pid]; ok {
			return h, nil
		}
		return nil, fmt.Errorf("process with pid %d: %w", v.Pid, errdefs.ErrNotFound)
	case *pb.ProcessSelector_Tag:
		var best *handle
		for _, h := range s.procs {
			if h.tag != nil && *h.tag == v.Tag && (best == nil || h.seq > best.seq) {
				best = h
			}
		}
		if best == nil {
			return nil, fmt.Errorf("process with tag %q: %w", v.Tag, errdefs.ErrNotFound)
		}
		return best, nil
	default:
		return nil, fmt.Errorf("process selector needs a pid or a tag: %w", errdefs.ErrInvalidArgument)
	}
}

// running returns the running processes ordered by pid.
func (s *Service) running() []*handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	hs := make([]*handle, 0, len(s.procs))
	for _, h := range s.procs {
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b *handle) int { return int(a.pid) - int(b.pid) })
	return hs
}
