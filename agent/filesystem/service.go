// Package filesystem is the agent's envd Filesystem service
// (shared/specs/e2b-wire.md §3): stat, list, create, move, remove and watch
// paths inside the sandbox, one file per RPC.
//
// Every request acts as a user (identity.FromHeader: the Basic authorization
// header, else Config.DefaultUser); relative paths resolve against that
// user's home. The agent runs as root, but each request's file system calls
// run with its user's credentials (asuser.Do): the request sees, creates,
// moves and removes what a process of that user could, what it creates
// belongs to that user, and the rest is permission_denied. So a symbolic
// link that the user's own code planted (~/data.csv -> /etc/passwd) gives a
// request no more than the user had; envd, which acts as root throughout,
// would follow it.
package filesystem

import (
	"errors"
	"log/slog"
	"sync"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/proto/filesystem/filesystemconnect"
)

// DefaultMaxWatcherEvents bounds how many events a polling watcher keeps
// between two GetWatcherEvents calls when Config.MaxWatcherEvents is zero.
const DefaultMaxWatcherEvents = 10000

// Config configures the Filesystem service.
type Config struct {
	// DefaultUser is the user a request acts as when it names none; empty
	// means identity.DefaultUser.
	DefaultUser string
	// Logger receives the service's logs; nil means slog.Default().
	Logger *slog.Logger
	// MaxWatcherEvents bounds the events each polling watcher buffers
	// between polls; zero means DefaultMaxWatcherEvents. When a client polls
	// too slowly the oldest events are dropped (see CreateWatcher).
	MaxWatcherEvents int
}

// Validate fills in defaults and checks the configuration.
func (c *Config) Validate() error {
	if c.DefaultUser == "" {
		c.DefaultUser = identity.DefaultUser
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxWatcherEvents == 0 {
		c.MaxWatcherEvents = DefaultMaxWatcherEvents
	}
	if c.MaxWatcherEvents < 0 {
		return errors.New("filesystem: MaxWatcherEvents is negative")
	}
	return nil
}

// Service implements filesystemconnect.FilesystemHandler. It is safe for
// concurrent use. It owns the polling watchers clients create; Close
// releases them.
type Service struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	watchers map[string]*pollWatcher // by watcher id
}

var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// New returns the Filesystem service. It panics when cfg does not validate:
// the agent's wiring has no error path here, and an invalid Config is a
// programming error, not a runtime condition.
func New(cfg Config) *Service {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return &Service{
		cfg:      cfg,
		log:      cfg.Logger.With("service", "filesystem"),
		watchers: make(map[string]*pollWatcher),
	}
}

// Close stops every polling watcher. Streaming watches end with their
// requests and need no closing.
func (s *Service) Close() error {
	s.mu.Lock()
	ws := s.watchers
	s.watchers = make(map[string]*pollWatcher)
	s.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
	return nil
}

// resolve returns the user a request acts as and p resolved for that user.
func (s *Service) resolve(req connect.AnyRequest, p string) (*identity.User, string, error) {
	u, err := identity.FromHeader(req.Header(), s.cfg.DefaultUser)
	if err != nil {
		return nil, "", err
	}
	abs, err := u.ResolvePath(p)
	if err != nil {
		return nil, "", err
	}
	return u, abs, nil
}
