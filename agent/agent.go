// Package agent is the in-sandbox agent: an HTTP server speaking the envd
// protocol (shared/specs/e2b-wire.md §3, §4, §6). It runs as PID 1 of every
// sandbox; cmd/tupper-agent is its binary.
package agent

import (
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/files"
	"github.com/lightbearco/tupper/agent/filesystem"
	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/agent/process"
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
	// Env is the base environment of every process the agent starts.
	Env []string
	// AccessToken, when set, must accompany every request in the
	// X-Access-Token header, except /health and signed /files URLs.
	AccessToken string
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
// /files, /health, /envs and /metrics.
func NewHandler(cfg Config) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	procs, err := process.New(process.Config{DefaultUser: cfg.DefaultUser, Env: cfg.Env, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	path, h := processconnect.NewProcessHandler(procs, connect.WithCompressMinBytes(1<<20))
	mux.Handle(path, h)
	fs := filesystem.New(filesystem.Config{DefaultUser: cfg.DefaultUser, Logger: cfg.Logger})
	path, h = filesystemconnect.NewFilesystemHandler(fs)
	mux.Handle(path, h)
	mux.Handle("/files", files.New(files.Config{DefaultUser: cfg.DefaultUser, AccessToken: cfg.AccessToken, Logger: cfg.Logger}))
	st := status.New(status.Config{Env: cfg.Env, Logger: cfg.Logger})
	mux.Handle("/health", st)
	mux.Handle("/envs", st)
	mux.Handle("/metrics", st)
	return requireToken(cfg.AccessToken, mux), nil
}

// requireToken refuses requests without the access token. /health stays
// open (the SDK probes it), and /files checks signed URLs itself.
func requireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/health", r.URL.Path == "/files":
			next.ServeHTTP(w, r)
		case subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Access-Token")), []byte(token)) == 1:
			next.ServeHTTP(w, r)
		default:
			http.Error(w, "missing or wrong X-Access-Token", http.StatusUnauthorized)
		}
	})
}
