// Package agent is the in-sandbox agent: an HTTP server speaking the envd
// protocol (shared/specs/e2b-wire.md §3, §4, §6). It runs as PID 1 of every
// sandbox; cmd/tupper-agent is its binary.
package agent

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/accesstoken"
	"github.com/lightbearco/tupper/agent/files"
	"github.com/lightbearco/tupper/agent/filesystem"
	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/agent/process"
	"github.com/lightbearco/tupper/agent/startcmd"
	"github.com/lightbearco/tupper/agent/status"
	"github.com/lightbearco/tupper/proto"
	"github.com/lightbearco/tupper/proto/filesystem/filesystemconnect"
	"github.com/lightbearco/tupper/proto/process/processconnect"
)

// Version is the envd protocol version the agent implements.
const Version = proto.EnvdVersion

// Config configures the agent's server.
type Config struct {
	// DefaultUser is the user requests act as when they name none;
	// empty means identity.DefaultUser.
	DefaultUser string
	// DefaultWorkdir is where commands run when they name no directory;
	// empty means the user's home.
	DefaultWorkdir string
	// Env is the base environment of every process the agent starts.
	Env []string
	// AccessToken, when set, must accompany every request in the
	// X-Access-Token header, except /health and signed /files URLs. It is
	// the token at start: POST /init replaces it (see docs/design/agent-init.md).
	AccessToken string
	// TokenChanged, when set, is called by /init with the access token it
	// has just put in place of the old one, before /init answers, for
	// what checks the token beyond this handler (the code interpreter, a
	// process of its own). It must return only once that refuses the old
	// token. Calls do not overlap.
	TokenChanged func(token string)
	// Network, when set, is what /init rewrites of the sandbox's view of
	// its network. Nil means the agent does not own /etc/resolv.conf and
	// /etc/hosts (it is not the sandbox's first process), and /init
	// refuses to change them.
	Network *Network
	// Start, when set, is the template's start command and ready check:
	// NewHandler starts them at once with the handler's process service
	// (it fills in Procs, and Logger when nil), and /health answers 204
	// only once they are ready (see package startcmd).
	Start *startcmd.Config
	// Logger receives the agent's logs; nil means slog.Default().
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
		return errors.New("agent: default user has a bad name")
	}
	return nil
}

// NewHandler returns the agent's whole HTTP surface: the Connect services
// process.Process and filesystem.Filesystem (JSON and binary encodings),
// /files, /health, /envs, /metrics, and /init for the engine.
func NewHandler(cfg Config) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	procs, err := process.New(process.Config{DefaultUser: cfg.DefaultUser, DefaultWorkdir: cfg.DefaultWorkdir, Env: cfg.Env, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	path, h := processconnect.NewProcessHandler(procs, connect.WithCompressMinBytes(1<<20))
	mux.Handle(path, h)
	fs := filesystem.New(filesystem.Config{DefaultUser: cfg.DefaultUser, Logger: cfg.Logger})
	path, h = filesystemconnect.NewFilesystemHandler(fs)
	mux.Handle(path, h)
	token := accesstoken.New(cfg.AccessToken)
	mux.Handle("/files", files.New(files.Config{DefaultUser: cfg.DefaultUser, AccessToken: token, Logger: cfg.Logger}))
	st := status.New(status.Config{Env: cfg.Env, Logger: cfg.Logger})
	var health http.Handler = st
	if cfg.Start != nil {
		sc := *cfg.Start
		sc.Procs = procs
		if sc.Logger == nil {
			sc.Logger = cfg.Logger
		}
		runner, err := startcmd.Start(sc)
		if err != nil {
			return nil, err
		}
		health = runner.Health(st)
	}
	mux.Handle("/health", health)
	mux.Handle("/envs", st)
	mux.Handle("/metrics", st)
	ih := &initHandler{token: token, tokenChanged: cfg.TokenChanged, log: cfg.Logger.With("op", "init"),
		addEnv: func(vars map[string]string) { procs.AddEnv(vars); st.AddEnv(vars) }}
	if cfg.Network != nil {
		n := *cfg.Network // /init updates its copy
		ih.net = &n
	}
	mux.Handle("POST /init", ih)
	return requireToken(token, mux), nil
}

// requireToken refuses requests without the access token token holds at
// the time (none: every request passes). /health stays open (the SDK
// probes it), and /files checks signed URLs itself.
func requireToken(token *accesstoken.Token, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/health", r.URL.Path == "/files":
			next.ServeHTTP(w, r)
		case token.Opens(r.Header.Get("X-Access-Token")):
			next.ServeHTTP(w, r)
		default:
			http.Error(w, "missing or wrong X-Access-Token", http.StatusUnauthorized)
		}
	})
}
