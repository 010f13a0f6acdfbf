// Package interpreter is Tupper's code interpreter: the server that
// sandboxes of the code-interpreter template run on port 49999, speaking
// the protocol of E2B's code interpreter (shared/specs/e2b-wire.md §5), so
// that the published @e2b/code-interpreter SDKs work unchanged.
//
// Code runs in contexts, each with a kernel that keeps state between
// cells: Python through a Jupyter kernel (ipykernel, driven by
// kernels/python_bridge.py), JavaScript and TypeScript in a node vm
// context (kernels/node_driver.js), and bash in a long-lived shell.
// A python and a javascript context exist from the start.
package interpreter

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lightbearco/tupper/agent/accesstoken"
)

// Port is where E2B's SDKs look for the code interpreter.
const Port = 49999

// Languages the interpreter runs, as contexts and /execute name them.
const (
	Python     = "python"
	JavaScript = "javascript"
	TypeScript = "typescript"
	Bash       = "bash"
)

// aliases are the other names clients use for the languages.
var aliases = map[string]string{
	"": Python, "python3": Python, "py": Python,
	"js": JavaScript, "node": JavaScript, "nodejs": JavaScript,
	"ts": TypeScript,
	"sh": Bash, "shell": Bash,
}

// Limits on what clients can ask of the server.
const (
	// maxContexts bounds the contexts a sandbox holds: each is a process
	// (a Python one is tens of megabytes).
	maxContexts = 32
	// maxBody bounds a request's body: the code of one cell.
	maxBody = 16 << 20
	// startTimeout bounds a kernel's start.
	startTimeout = 2 * time.Minute
)

// kernelScripts are the kernels' programs, written to a private directory
// for the interpreters to run (a script passed inline would fill every
// `ps` in the sandbox).
//
//go:embed kernels/python_bridge.py kernels/python_setup.py kernels/node_driver.js
var kernelScripts embed.FS

// Config configures the server.
type Config struct {
	// AccessToken, when set, must come in the X-Access-Token header of
	// every /execute: it is the sandbox's envd token, which E2B's SDKs
	// send there. Contexts can be listed, made and removed without it,
	// as on E2B. It is the token at start: SetAccessToken replaces it.
	AccessToken string
	// Env is the base environment of the kernels.
	Env []string
	// Dir is the default working directory of new contexts.
	Dir string
	// Python, Node and Bash are the programs run for each language;
	// empty means python3, node and bash from PATH.
	Python, Node, Bash string
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate fills defaults and checks the configuration.
func (c *Config) Validate() error {
	if c.Dir == "" {
		c.Dir = "/"
	}
	if c.Python == "" {
		c.Python = "python3"
	}
	if c.Node == "" {
		c.Node = "node"
	}
	if c.Bash == "" {
		c.Bash = "bash"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if !strings.HasPrefix(c.Dir, "/") {
		return fmt.Errorf("interpreter: Dir %q is not absolute", c.Dir)
	}
	return nil
}

// Server serves the code interpreter protocol. Close ends its kernels.
type Server struct {
	cfg   Config
	mux   *http.ServeMux
	token *accesstoken.Token

	scriptsMu sync.Mutex
	scripts   string // the directory of the kernels' programs, once written

	mu       sync.Mutex
	contexts map[string]*codeContext
	defaults map[string]*codeContext // per language, for /execute without context_id
	closed   bool
}

// New returns a server with its default python and javascript contexts,
// whose kernels start at once in the background.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), token: accesstoken.New(cfg.AccessToken), contexts: map[string]*codeContext{}, defaults: map[string]*codeContext{}}
	s.mux.HandleFunc("GET /health", s.health)
	s.mux.HandleFunc("POST /execute", s.execute)
	s.mux.HandleFunc("POST /contexts", s.createContext)
	s.mux.HandleFunc("GET /contexts", s.listContexts)
	s.mux.HandleFunc("DELETE /contexts/{id}", s.removeContext)
	s.mux.HandleFunc("POST /contexts/{id}/restart", s.restartContext)
	for _, lang := range []string{Python, JavaScript} {
		c, err := s.defaultContext(lang)
		if err != nil {
			return nil, err
		}
		c.warm()
	}
	return s, nil
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// SetAccessToken replaces the token /execute requires, as the agent's
// /init does after a restore: every /execute that arrives after it returns
// needs token, and the old one is refused. It is safe to call while the
// server serves.
func (s *Server) SetAccessToken(token string) { s.token.Set(token) }

// Close ends every context's kernel.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	all := make([]*codeContext, 0, len(s.contexts))
	for _, c := range s.contexts {
		all = append(all, c)
	}
	s.contexts, s.defaults = map[string]*codeContext{}, map[string]*codeContext{}
	s.mu.Unlock()
	for _, c := range all {
		c.close()
	}
	s.scriptsMu.Lock()
	if s.scripts != "" {
		os.RemoveAll(s.scripts)
	}
	s.scriptsMu.Unlock()
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// contextJSON is a context on the wire.
type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	if !s.token.Opens(r.Header.Get("X-Access-Token")) {
		writeError(w, http.StatusUnauthorized, "missing or wrong X-Access-Token: send the sandbox's envdAccessToken")
		return
	}
	var req executeRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.ContextID != "" && req.Language != "" {
		writeError(w, http.StatusBadRequest, "give context_id or language, not both")
		return
	}
	for k, v := range req.EnvVars {
		if !envNameRe.MatchString(k) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("env_vars: %q is not a valid variable name", k))
			return
		}
		if strings.ContainsRune(v, 0) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("env_vars: the value of %s holds a NUL byte, which no environment can", k))
			return
		}
	}
	var c *codeContext
	if req.ContextID != "" {
		s.mu.Lock()
		c = s.contexts[req.ContextID]
		s.mu.Unlock()
		if c == nil {
			writeError(w, http.StatusNotFound, fmt.Sprintf("context %q not found: it was removed, or never made in this sandbox", req.ContextID))
			return
		}
	} else {
		lang, err := language(req.Language)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if c, err = s.defaultContext(lang); err != nil {
			writeError(w, statusOf(err), err.Error())
			return
		}
	}

	// The response starts at once; what goes wrong from here on is an
	// error line, as the SDKs expect.
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	out := newNDJSON(w)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	c.run(r.Context(), req.Code, req.EnvVars, out)
	out.end()
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	lang, err := language(req.Language)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = s.cfg.Dir
	}
	if !strings.HasPrefix(cwd, "/") {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("cwd %q is not an absolute path", cwd))
		return
	}
	// As the interpreter's user, who runs the kernels.
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		why := "is not a directory"
		if err != nil {
			why = "cannot be used: " + err.Error()
		}
		writeError(w, http.StatusBadRequest, fmt.Sprintf("cwd %q %s", cwd, why))
		return
	}
	c, err := s.add(lang, cwd, false)
	if err != nil {
		writeError(w, statusOf(err), err.Error())
		return
	}
	// The kernel starts now, so that a context that cannot start says so
	// here rather than at its first cell.
	ctx, cancel := context.WithTimeout(r.Context(), startTimeout)
	defer cancel()
	if _, _, err := c.kernel(ctx); err != nil {
		s.remove(c.id)
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("context %s: %v", lang, err))
		return
	}
	writeJSON(w, http.StatusOK, c.json())
}

func (s *Server) listContexts(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	list := make([]contextJSON, 0, len(s.contexts))
	for _, c := range s.contexts {
		list = append(list, c.json())
	}
	s.mu.Unlock()
	slices.SortFunc(list, func(a, b contextJSON) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) removeContext(w http.ResponseWriter, r *http.Request) {
	c := s.remove(r.PathValue("id"))
	if c == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("context %q not found", r.PathValue("id")))
		return
	}
	c.close()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	c := s.contexts[r.PathValue("id")]
	s.mu.Unlock()
	if c == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("context %q not found", r.PathValue("id")))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), startTimeout)
	defer cancel()
	if err := c.restart(ctx); err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("restart context %s: %v", c.id, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// errTooMany: the sandbox holds maxContexts contexts already.
var errTooMany = fmt.Errorf("this sandbox already has %d code contexts: remove some first", maxContexts)

// errClosed: the server is shutting down.
var errClosed = errors.New("the code interpreter is shutting down")

// defaultContext returns the language's default context, making it when
// there is none (it was removed, or the language has none yet).
func (s *Server) defaultContext(lang string) (*codeContext, error) {
	s.mu.Lock()
	c := s.defaults[lang]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return s.add(lang, s.cfg.Dir, true)
}

// add makes a context; as a default, it is the language's default unless
// another add made one first, which it then returns.
func (s *Server) add(lang, cwd string, asDefault bool) (*codeContext, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	if c := s.defaults[lang]; asDefault && c != nil {
		return c, nil
	}
	if len(s.contexts) >= maxContexts {
		return nil, errTooMany
	}
	c := &codeContext{id: newID(), lang: lang, cwd: cwd, srv: s}
	s.contexts[c.id] = c
	if asDefault {
		s.defaults[lang] = c
	}
	return c, nil
}

// remove forgets the context id and returns it, or nil.
func (s *Server) remove(id string) *codeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.contexts[id]
	if c == nil {
		return nil
	}
	delete(s.contexts, id)
	if s.defaults[c.lang] == c {
		delete(s.defaults, c.lang)
	}
	return c
}

// language returns the canonical name of a language a client gave.
func language(name string) (string, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if a, ok := aliases[n]; ok {
		n = a
	}
	switch n {
	case Python, JavaScript, TypeScript, Bash:
		return n, nil
	}
	return "", fmt.Errorf("language %q is not available in this sandbox: use python, javascript (js), typescript (ts) or bash", name)
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, errTooMany):
		return http.StatusTooManyRequests
	case errors.Is(err, errClosed):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// decodeBody reads a JSON body into v, answering 400 and returning false
// when it cannot.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes", maxBody))
			return false
		}
		if errors.Is(err, io.EOF) {
			return true // no body: all defaults
		}
		writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return false
	}
	// The rest (a newline, say) is read too: a server that answers before
	// the body's end makes some proxies cut the answer.
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes", maxBody))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	http.Error(w, msg, status)
}

// newID returns a context id shaped like a UUID, as E2B's are.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
