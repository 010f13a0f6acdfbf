// Package files serves the agent's plain-HTTP file transfer,
// GET and POST /files (shared/specs/e2b-wire.md §4): downloads stream a file's
// bytes, uploads stream request bodies to disk and replace files atomically.
//
// A request acts as a user: the Basic authorization header's, else the
// username query parameter's, else Config.DefaultUser. Relative paths resolve
// against that user's home. Files are read and written with that user's own
// credentials (asuser.Do): a request reads and writes what the user's
// processes could and no more (403 otherwise), and the files and directories
// it creates belong to that user.
package files

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/lightbearco/tupper/agent/accesstoken"
	"github.com/lightbearco/tupper/agent/filesystem/userfs"
	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
)

// Config configures the /files handler.
type Config struct {
	// DefaultUser is the user a request acts as when it names none; empty
	// means identity.DefaultUser.
	DefaultUser string
	// AccessToken, when it holds a token, must accompany every request:
	// as the X-Access-Token header, or as a signature over the request in
	// the query (see Signature). Each request is checked against the token
	// it holds then, so a token replaced while the handler serves (the
	// agent's /init) takes effect at once, and signatures made with the
	// old one stop working. Nil or empty means requests need neither.
	AccessToken *accesstoken.Token
	// Logger receives the handler's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate fills in defaults and checks the configuration.
func (c *Config) Validate() error {
	if c.DefaultUser == "" {
		c.DefaultUser = identity.DefaultUser
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// handler serves /files. It holds no per-request state and is safe for
// concurrent use.
type handler struct {
	cfg Config
	log *slog.Logger
}

// New returns the /files handler: GET (and HEAD) download a file, POST
// uploads one or more. Other methods get 405.
func New(cfg Config) http.Handler {
	cfg.Validate()
	return &handler{cfg: cfg, log: cfg.Logger.With("op", "files")}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.download(w, r)
	case http.MethodPost:
		h.upload(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on /files")
	}
}

// user authorizes r for op (opRead or opWrite) and returns the user it acts
// as.
func (h *handler) user(r *http.Request, op string) (*identity.User, error) {
	signed, err := h.authorize(r, op)
	if err != nil {
		return nil, err
	}
	if signed {
		// The signature covers the username query parameter, not an
		// Authorization header: a header must not switch the user a
		// signed URL was made for.
		name := r.URL.Query().Get("username")
		if name == "" {
			name = h.cfg.DefaultUser
		}
		return identity.Lookup(name)
	}
	return identity.FromRequest(r, h.cfg.DefaultUser)
}

// statuses maps errdefs classes to HTTP statuses: the package's one
// translation from error classes to the wire.
var statuses = []struct {
	class  error
	status int
}{
	{errdefs.ErrNotFound, http.StatusNotFound},
	{errdefs.ErrInvalidArgument, http.StatusBadRequest},
	{errdefs.ErrFailedPrecondition, http.StatusBadRequest},
	{errdefs.ErrUnauthenticated, http.StatusUnauthorized},
	{errdefs.ErrPermissionDenied, http.StatusForbidden},
	{errdefs.ErrAlreadyExists, http.StatusConflict},
	{errdefs.ErrResourceExhausted, http.StatusInsufficientStorage},
	{errdefs.ErrNotSupported, http.StatusUnsupportedMediaType},
	{errdefs.ErrDeadlineExceeded, http.StatusGatewayTimeout},
	{errdefs.ErrUnavailable, http.StatusServiceUnavailable},
}

// statusOf returns the HTTP status for err. A failure reading the request
// body is the client's (400); OS errors are classified first; anything
// unclassified is a 500.
func statusOf(err error) int {
	var re *userfs.ReadError
	if errors.As(err, &re) {
		return http.StatusBadRequest
	}
	err = userfs.Classify(err)
	for _, s := range statuses {
		if errors.Is(err, s.class) {
			return s.status
		}
	}
	return http.StatusInternalServerError
}

// fail logs err and answers it with its status.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	h.log.Log(r.Context(), level, "request failed", "method", r.Method, "path", r.URL.Query().Get("path"), "status", status, "err", err)
	msg := err.Error()
	if userfs.IsDiskFull(err) {
		msg = "not enough disk space: " + msg
	}
	writeError(w, status, msg)
}

// errorBody is the JSON error shape the E2B control plane uses, which the
// SDKs also understand here: the HTTP status as code, and a message.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	// Headers set for a download that failed before its first byte must not
	// describe the error body.
	h.Del("Content-Disposition")
	h.Del("Content-Length")
	h.Del("Content-Encoding")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(errorBody{Code: status, Message: msg})
}
