package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/localsock"
)

// The data plane's routing headers and the agent's port, as the E2B SDKs
// send them (shared/specs/e2b-wire.md §1).
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	headerAPIKey      = "X-API-KEY"
	agentPort         = "49983"
)

// The environment variables a zero Client and HTTPConfigFromEnv read.
// The TUPPER_ ones win; the E2B_ ones let a program written for E2B's
// settings work unchanged.
const (
	EnvAPIURL        = "TUPPER_API_URL"
	EnvAPIKey        = "TUPPER_API_KEY"
	EnvSandboxURL    = "TUPPER_SANDBOX_URL"
	EnvE2BAPIURL     = "E2B_API_URL"
	EnvE2BAPIKey     = "E2B_API_KEY"
	EnvE2BSandboxURL = "E2B_SANDBOX_URL"
)

// maxAPIBody bounds a control-plane response body: the largest is a page of
// 100 listed sandboxes with their metadata.
const maxAPIBody = 8 << 20

// maxRetries is how often a control-plane call refused with 429 and a
// Retry-After header is tried again; maxRetryWait caps each wait.
const (
	maxRetries   = 3
	maxRetryWait = 10 * time.Second
)

// HTTPConfig configures an HTTPTransport.
type HTTPConfig struct {
	// APIURL is the control plane, for example http://127.0.0.1:3000,
	// or the unix socket of a `tupper serve` on this host, as
	// unix:///run/tupper.sock; there the daemon knows its peer, and root
	// and the members of group tupper need no APIKey. Empty means the
	// local socket of the daemon of $TUPPER_ROOT (else of the default
	// state root) when that socket exists, and ErrNoEndpoint otherwise.
	APIURL string
	// APIKey is sent as X-API-KEY on control-plane calls; a Tupper key
	// comes from `tupper keys create`.
	APIKey string
	// SandboxURL is where the data plane (the sandboxes' agents) is
	// reached, with the E2b-Sandbox-Id header naming the sandbox; empty
	// means APIURL, as with `tupper serve`, which serves both on one port
	// (and its socket). A unix:// URL is allowed here too.
	SandboxURL string
	// HTTPClient carries every request; nil means http.DefaultClient. It
	// must not set a Timeout: command and watch streams last as long as
	// their commands. Bound calls with contexts instead. With a unix://
	// URL its Transport must be nil or an *http.Transport, a copy of
	// which dials the socket.
	HTTPClient *http.Client
}

// HTTPConfigFromEnv reads an HTTPConfig from the environment:
// TUPPER_API_URL, TUPPER_API_KEY and TUPPER_SANDBOX_URL, else the E2B
// SDKs' E2B_API_URL, E2B_API_KEY and E2B_SANDBOX_URL. The data-plane URL
// is taken from the same family as the API URL, so that half of one
// setting is never paired with half of another. APIURL is empty when
// neither URL is set.
func HTTPConfigFromEnv() HTTPConfig {
	var cfg HTTPConfig
	switch {
	case os.Getenv(EnvAPIURL) != "":
		cfg.APIURL, cfg.SandboxURL = os.Getenv(EnvAPIURL), os.Getenv(EnvSandboxURL)
	case os.Getenv(EnvE2BAPIURL) != "":
		cfg.APIURL, cfg.SandboxURL = os.Getenv(EnvE2BAPIURL), os.Getenv(EnvE2BSandboxURL)
	}
	cfg.APIKey = os.Getenv(EnvAPIKey)
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv(EnvE2BAPIKey)
	}
	return cfg
}

// Validate checks the configuration and fills its defaults.
func (c *HTTPConfig) Validate() error {
	if c.APIURL == "" {
		p := localsock.Of("")
		if !localsock.Exists(p) {
			return ErrNoEndpoint
		}
		c.APIURL = localsock.URL(p)
	}
	if err := checkBaseURL("API URL", c.APIURL); err != nil {
		return err
	}
	if c.SandboxURL == "" {
		c.SandboxURL = c.APIURL
	}
	if err := checkBaseURL("sandbox URL", c.SandboxURL); err != nil {
		return err
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	return nil
}

func checkBaseURL(what, s string) error {
	if strings.HasPrefix(s, "unix:") {
		if _, ok := localsock.FromURL(s); !ok {
			return fmt.Errorf("%s %q: %w: want unix:///absolute/path/of/the.sock", what, s, errdefs.ErrInvalidArgument)
		}
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%s %q: %w: want http(s)://host[:port][/path] or unix:///path", what, s, errdefs.ErrInvalidArgument)
	}
	return nil
}

// HTTPTransport is a Transport that reaches Tupper, or any server speaking
// the E2B API, over HTTP: the control plane at APIURL (REST with JSON,
// authenticated by the API key) and each sandbox's agent at SandboxURL,
// routed by the E2b-Sandbox-Id header. It is safe for concurrent use.
type HTTPTransport struct {
	// endpoint is the API URL as configured, unix:// included.
	endpoint string
	// apiURL and sandboxURL are the base URLs requests are sent to,
	// without a trailing slash: a unix socket's is http://socketHost.
	apiURL     string
	sandboxURL string
	apiKey     string
	client     *http.Client // the control plane's
	dataClient *http.Client // the data plane's

	// onSocket reports that the data plane is reached through a unix
	// socket; publicURL is then the daemon's TCP URL, as its answers
	// name it (localsock.HeaderPublicURL), for the URLs handed to other clients.
	onSocket bool

	mu        sync.Mutex
	publicURL string
	// tokens caches each sandbox's envdAccessToken, learnt from create,
	// connect or get, so that DataPlane needs no call of its own.
	tokens map[string]string
}

var _ Transport = (*HTTPTransport)(nil)

// maxCachedTokens bounds the token cache: sandboxes that die on their own
// are never forgotten otherwise.
const maxCachedTokens = 4096

// NewHTTPTransport returns an HTTPTransport for cfg. It makes no request.
func NewHTTPTransport(cfg HTTPConfig) (*HTTPTransport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	apiURL, client, err := viaSocket(cfg.APIURL, cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	sandboxURL, dataBase, err := viaSocket(cfg.SandboxURL, cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	// The data plane's client sends stream requests with a length, as the
	// E2B SDKs do (see fixedLengthStreams); it is otherwise the caller's.
	data := *dataBase
	base := data.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	data.Transport = fixedLengthStreams{base: base}
	return &HTTPTransport{
		endpoint:   strings.TrimRight(cfg.APIURL, "/"),
		apiURL:     strings.TrimRight(apiURL, "/"),
		sandboxURL: strings.TrimRight(sandboxURL, "/"),
		apiKey:     cfg.APIKey,
		client:     client,
		dataClient: &data,
		onSocket:   isSocket(cfg.SandboxURL),
		tokens:     map[string]string{},
	}, nil
}

// APIURL returns the control plane's URL as configured: an http(s) URL, or
// the unix:// URL of a local socket.
func (t *HTTPTransport) APIURL() string { return t.endpoint }

// The control plane's bodies, in the E2B API's field names
// (shared/specs/e2b-wire.md §2).

type createBody struct {
	// TemplateID is left out when empty: the server then applies its
	// default template ("base" unless `tupper serve` was told otherwise).
	TemplateID string            `json:"templateID,omitempty"`
	Timeout    int64             `json:"timeout,omitempty"` // seconds
	Metadata   map[string]string `json:"metadata,omitempty"`
	EnvVars    map[string]string `json:"envVars,omitempty"`
	// CPUCount, MemoryMB and DiskSizeMB are Tupper's extensions, named as
	// the listing reports them; E2B's API sizes sandboxes by template and
	// ignores them.
	CPUCount            float64        `json:"cpuCount,omitempty"`
	MemoryMB            int            `json:"memoryMB,omitempty"`
	DiskSizeMB          int            `json:"diskSizeMB,omitempty"`
	Network             *NetworkPolicy `json:"network,omitempty"`
	AllowInternetAccess *bool          `json:"allow_internet_access,omitempty"`
	// Backend is Tupper's extension too: the backend to run on, empty
	// for the server's default.
	Backend         string            `json:"backend,omitempty"`
	AutoPause       bool              `json:"autoPause,omitempty"`
	AutoPauseMemory *bool             `json:"autoPauseMemory,omitempty"`
	AutoResume      *autoResumeJSON   `json:"autoResume,omitempty"`
	VolumeMounts    []volumeMountJSON `json:"volumeMounts,omitempty"`
}

// volumeMountJSON is one of a create's volumeMounts.
type volumeMountJSON struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// autoResumeJSON is a create's autoResume, as the E2B SDKs send it.
type autoResumeJSON struct {
	Enabled bool `json:"enabled"`
}

// networkUpdateBody is the body of PUT /sandboxes/{id}/network.
type networkUpdateBody struct {
	AllowOut            []string                 `json:"allowOut,omitempty"`
	DenyOut             []string                 `json:"denyOut,omitempty"`
	Rules               map[string][]NetworkRule `json:"rules,omitempty"`
	AllowInternetAccess *bool                    `json:"allow_internet_access,omitempty"`
}

// UpdateNetwork implements NetworkTransport: PUT /sandboxes/{id}/network.
func (t *HTTPTransport) UpdateNetwork(ctx context.Context, id string, policy *NetworkPolicy, internet *bool) error {
	body := networkUpdateBody{AllowInternetAccess: internet}
	if policy != nil {
		body.AllowOut, body.DenyOut, body.Rules = policy.AllowOut, policy.DenyOut, policy.Rules
	}
	_, err := t.call(ctx, http.MethodPut, "/sandboxes/"+url.PathEscape(id)+"/network", nil, body, nil)
	return err
}

// NetworkDenials implements NetworkTransport: GET
// /sandboxes/{id}/network/denials, Tupper's own route.
func (t *HTTPTransport) NetworkDenials(ctx context.Context, id string) ([]NetworkDenial, error) {
	var out struct {
		Denials []NetworkDenial `json:"denials"`
	}
	if _, err := t.call(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id)+"/network/denials", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Denials, nil
}

type timeoutBody struct {
	Timeout int64 `json:"timeout"` // seconds
}

// sandboxJSON is a Sandbox (create, connect), a ListedSandbox or a
// SandboxDetail: their fields overlap, and absent ones stay zero.
type sandboxJSON struct {
	TemplateID          string            `json:"templateID"`
	Alias               string            `json:"alias"`
	SandboxID           string            `json:"sandboxID"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int               `json:"memoryMB"`
	DiskSizeMB          int               `json:"diskSizeMB"`
	Metadata            map[string]string `json:"metadata"`
	State               string            `json:"state"`
	EnvdVersion         string            `json:"envdVersion"`
	EnvdAccessToken     *string           `json:"envdAccessToken"`
	Network             *NetworkPolicy    `json:"network"`
	AllowInternetAccess *bool             `json:"allowInternetAccess"`
	// Backend is Tupper's extension: the backend the sandbox runs on.
	Backend string `json:"backend"`
}

func (s *sandboxJSON) info() *SandboxInfo {
	info := &SandboxInfo{
		SandboxID: s.SandboxID, TemplateID: s.TemplateID, Alias: s.Alias, Metadata: s.Metadata,
		State: s.State, StartedAt: s.StartedAt, EndAt: s.EndAt, CPUCount: s.CPUCount,
		MemoryMB: s.MemoryMB, DiskSizeMB: s.DiskSizeMB, EnvdVersion: s.EnvdVersion,
		Network: s.Network, AllowInternetAccess: s.AllowInternetAccess, Backend: s.Backend,
	}
	if s.EnvdAccessToken != nil {
		info.EnvdAccessToken = *s.EnvdAccessToken
	}
	return info
}

// running is info of an answer that describes a sandbox which runs (a
// create's, a connect's or a fork's), whose state E2B's API leaves out.
func (s *sandboxJSON) running() *SandboxInfo {
	info := s.info()
	if info.State == "" {
		info.State = "running"
	}
	return info
}

// remember caches the access token of a sandbox an answer described.
// Listings carry no token, so only create, connect and get call it.
func (t *HTTPTransport) remember(s *sandboxJSON) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.tokens) >= maxCachedTokens {
		clear(t.tokens)
	}
	tok := ""
	if s.EnvdAccessToken != nil {
		tok = *s.EnvdAccessToken
	}
	t.tokens[s.SandboxID] = tok
}

func (t *HTTPTransport) forget(id string) {
	t.mu.Lock()
	delete(t.tokens, id)
	t.mu.Unlock()
}

// CreateSandbox implements Transport: POST /v2/sandboxes. An Image is
// sent as the template: Tupper resolves both through its image store. No
// template leaves the choice to the server.
func (t *HTTPTransport) CreateSandbox(ctx context.Context, req CreateRequest) (*SandboxInfo, error) {
	if req.Template != "" && req.Image != "" {
		return nil, fmt.Errorf("name a template or an image, not both: %w", errdefs.ErrInvalidArgument)
	}
	if req.Timeout < 0 {
		return nil, fmt.Errorf("timeout %v is negative: %w", req.Timeout, errdefs.ErrInvalidArgument)
	}
	body := createBody{
		TemplateID: req.Template, Timeout: ceilSeconds(req.Timeout), Metadata: req.Metadata,
		EnvVars: req.Env, CPUCount: req.CPUs, MemoryMB: req.MemoryMB, DiskSizeMB: req.DiskMB,
		Network: req.Network, AllowInternetAccess: req.AllowInternetAccess, Backend: req.Backend,
	}
	if req.Image != "" {
		body.TemplateID = req.Image
	}
	body.AutoPause, body.AutoPauseMemory = req.AutoPause, req.AutoPauseMemory
	if req.AutoResume {
		body.AutoResume = &autoResumeJSON{Enabled: true}
	}
	for _, m := range req.VolumeMounts {
		body.VolumeMounts = append(body.VolumeMounts, volumeMountJSON{Name: m.Name, Path: m.Path})
	}
	var out sandboxJSON
	if _, err := t.call(ctx, http.MethodPost, "/v2/sandboxes", nil, body, &out); err != nil {
		return nil, err
	}
	t.remember(&out)
	return out.running(), nil
}

// ConnectSandbox implements Transport: POST /sandboxes/{id}/connect.
func (t *HTTPTransport) ConnectSandbox(ctx context.Context, id string, timeout time.Duration) (*SandboxInfo, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("timeout %v is negative: %w", timeout, errdefs.ErrInvalidArgument)
	}
	var body any = struct{}{}
	if timeout > 0 {
		body = timeoutBody{Timeout: ceilSeconds(timeout)}
	}
	var out sandboxJSON
	if _, err := t.call(ctx, http.MethodPost, sandboxPath(id, "/connect"), nil, body, &out); err != nil {
		return nil, err
	}
	if out.SandboxID == "" {
		out.SandboxID = id
	}
	t.remember(&out)
	return out.running(), nil
}

// ListSandboxes implements Transport: GET /v2/sandboxes.
func (t *HTTPTransport) ListSandboxes(ctx context.Context, q ListQuery) (*ListPage, error) {
	v := url.Values{}
	if len(q.Metadata) > 0 {
		v.Set("metadata", metadataQuery(q.Metadata))
	}
	if len(q.States) > 0 {
		v.Set("state", strings.Join(q.States, ","))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.NextToken != "" {
		v.Set("nextToken", q.NextToken)
	}
	var out []sandboxJSON
	h, err := t.call(ctx, http.MethodGet, "/v2/sandboxes", v, nil, &out)
	if err != nil {
		return nil, err
	}
	page := &ListPage{NextToken: h.Get("X-Next-Token")}
	for i := range out {
		page.Sandboxes = append(page.Sandboxes, *out[i].info())
	}
	return page, nil
}

// GetSandbox implements Transport: GET /sandboxes/{id}.
func (t *HTTPTransport) GetSandbox(ctx context.Context, id string) (*SandboxInfo, error) {
	var out sandboxJSON
	if _, err := t.call(ctx, http.MethodGet, sandboxPath(id, ""), nil, nil, &out); err != nil {
		if IsNotFound(err) {
			t.forget(id)
		}
		return nil, err
	}
	if out.SandboxID == "" {
		out.SandboxID = id
	}
	t.remember(&out)
	return out.info(), nil
}

// SetTimeout implements Transport: POST /sandboxes/{id}/timeout. The
// timeout is sent in whole seconds, rounded up.
func (t *HTTPTransport) SetTimeout(ctx context.Context, id string, timeout time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("timeout %v must be positive: %w", timeout, errdefs.ErrInvalidArgument)
	}
	_, err := t.call(ctx, http.MethodPost, sandboxPath(id, "/timeout"), nil, timeoutBody{Timeout: ceilSeconds(timeout)}, nil)
	return err
}

// KillSandbox implements Transport: DELETE /sandboxes/{id}.
func (t *HTTPTransport) KillSandbox(ctx context.Context, id string) error {
	_, err := t.call(ctx, http.MethodDelete, sandboxPath(id, ""), nil, nil, nil)
	if err == nil || IsNotFound(err) {
		t.forget(id)
	}
	return err
}

var _ CheckpointTransport = (*HTTPTransport)(nil)

// PauseSandbox implements CheckpointTransport: POST /sandboxes/{id}/pause.
// The route's 409 means the sandbox is not running (E2B's SDKs read it as
// "paused already"), so it is classed as a failed precondition here,
// where the status's usual class would say "exists".
func (t *HTTPTransport) PauseSandbox(ctx context.Context, id string, keepMemory bool) error {
	body := struct {
		Memory bool `json:"memory"`
	}{keepMemory}
	_, err := t.call(ctx, http.MethodPost, sandboxPath(id, "/pause"), nil, body, nil)
	if e := (*Error)(nil); errors.As(err, &e) && e.Status == http.StatusConflict {
		e.Code, e.class = connect.CodeFailedPrecondition.String(), errdefs.ErrFailedPrecondition
	}
	return err
}

// snapshotJSON is a snapshot as the API reports it.
type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
	// SandboxID, CreatedAt and SizeBytes are Tupper's extensions.
	SandboxID string    `json:"sandboxID"`
	CreatedAt time.Time `json:"createdAt"`
	SizeBytes int64     `json:"sizeBytes"`
}

func (s *snapshotJSON) info() SnapshotInfo {
	return SnapshotInfo{SnapshotID: s.SnapshotID, Names: s.Names, SandboxID: s.SandboxID, CreatedAt: s.CreatedAt, SizeBytes: s.SizeBytes}
}

// CreateSnapshot implements CheckpointTransport: POST
// /sandboxes/{id}/snapshots.
func (t *HTTPTransport) CreateSnapshot(ctx context.Context, id, name string) (*SnapshotInfo, error) {
	body := struct {
		Name string `json:"name,omitempty"`
	}{name}
	var out snapshotJSON
	if _, err := t.call(ctx, http.MethodPost, sandboxPath(id, "/snapshots"), nil, body, &out); err != nil {
		return nil, err
	}
	info := out.info()
	return &info, nil
}

// ListSnapshots implements CheckpointTransport: GET /snapshots.
func (t *HTTPTransport) ListSnapshots(ctx context.Context, q SnapshotQuery) (*SnapshotPage, error) {
	v := url.Values{}
	if q.SandboxID != "" {
		v.Set("sandboxID", q.SandboxID)
	}
	if q.Name != "" {
		v.Set("name", q.Name)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.NextToken != "" {
		v.Set("nextToken", q.NextToken)
	}
	var out []snapshotJSON
	h, err := t.call(ctx, http.MethodGet, "/snapshots", v, nil, &out)
	if err != nil {
		return nil, err
	}
	page := &SnapshotPage{NextToken: h.Get("X-Next-Token")}
	for i := range out {
		page.Snapshots = append(page.Snapshots, out[i].info())
	}
	return page, nil
}

// DeleteSnapshot implements CheckpointTransport: DELETE /templates/{ref},
// as the E2B SDKs delete a snapshot.
func (t *HTTPTransport) DeleteSnapshot(ctx context.Context, ref string) error {
	_, err := t.call(ctx, http.MethodDelete, "/templates/"+url.PathEscape(ref), nil, nil, nil)
	return err
}

// forkBody is the body of POST /sandboxes/{id}/fork.
type forkBody struct {
	Count   int   `json:"count"`
	Timeout int64 `json:"timeout,omitempty"` // seconds
}

// forkResultJSON is one entry of a fork's answer: a sandbox, or the
// {code, message} of the error that kept it from starting.
type forkResultJSON struct {
	Sandbox *sandboxJSON `json:"sandbox"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// statusError is the error of a status and message that an answer carries
// in its body, such as a fork's failed entry, classed as fromResponse
// classes the status of a whole answer.
func statusError(status int, msg string) error {
	class, code := classOfStatus(status)
	return &Error{Code: code, Status: status, Message: msg, class: class}
}

// ForkSandbox implements CheckpointTransport: POST /sandboxes/{id}/fork.
func (t *HTTPTransport) ForkSandbox(ctx context.Context, id string, count int, timeout time.Duration) ([]ForkedSandbox, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("timeout %v is negative: %w", timeout, errdefs.ErrInvalidArgument)
	}
	var out []forkResultJSON
	if _, err := t.call(ctx, http.MethodPost, sandboxPath(id, "/fork"), nil, forkBody{Count: count, Timeout: ceilSeconds(timeout)}, &out); err != nil {
		return nil, err
	}
	res := make([]ForkedSandbox, len(out))
	for i, f := range out {
		switch {
		case f.Sandbox != nil && f.Sandbox.SandboxID != "":
			t.remember(f.Sandbox)
			res[i].Info = f.Sandbox.running()
		case f.Error != nil:
			res[i].Err = statusError(f.Error.Code, f.Error.Message)
		default:
			res[i].Err = fmt.Errorf("fork %d of %d: the answer names neither a sandbox nor an error: %w", i+1, len(out), errdefs.ErrUnavailable)
		}
	}
	return res, nil
}

// DataPlane implements Transport: the sandbox's agent is reached at
// SandboxURL with the routing headers E2b-Sandbox-Id and
// E2b-Sandbox-Port, and its access token. The token comes from the
// answer of an earlier create, connect or get, or from a get made now.
func (t *HTTPTransport) DataPlane(ctx context.Context, id string) (*DataPlane, error) {
	t.mu.Lock()
	tok, ok := t.tokens[id]
	t.mu.Unlock()
	if !ok {
		info, err := t.GetSandbox(ctx, id)
		if err != nil {
			return nil, err
		}
		tok = info.EnvdAccessToken
	}
	t.mu.Lock()
	public := t.publicURL
	t.mu.Unlock()
	return &DataPlane{
		BaseURL:     t.sandboxURL,
		Client:      t.dataClient,
		Header:      http.Header{headerSandboxID: {id}, headerSandboxPort: {agentPort}},
		AccessToken: tok,
		PublicURL:   public,
	}, nil
}

// call makes one control-plane request: body (when not nil) is sent as
// JSON, a 2xx answer is decoded into out (when not nil), and anything else
// becomes an *Error of the status's class. A 429 that names a Retry-After
// is tried again a few times.
func (t *HTTPTransport) call(ctx context.Context, method, path string, query url.Values, body, out any) (http.Header, error) {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return nil, fmt.Errorf("%s %s: encode request: %w", method, path, err)
		}
	}
	u := t.apiURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json")
		if t.apiKey != "" {
			req.Header.Set(headerAPIKey, t.apiKey)
		}
		resp, err := t.client.Do(req)
		if err != nil {
			return nil, fromTransport(err)
		}
		if u := resp.Header.Get(localsock.HeaderPublicURL); u != "" && t.onSocket {
			t.mu.Lock()
			t.publicURL = u
			t.mu.Unlock()
		}
		if resp.StatusCode == http.StatusTooManyRequests && attempt < maxRetries {
			if wait, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
				drain(resp)
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(wait):
				}
				continue
			}
		}
		defer resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return nil, fromResponse(resp)
		}
		if out != nil && resp.StatusCode != http.StatusNoContent {
			if err := json.NewDecoder(io.LimitReader(resp.Body, maxAPIBody)).Decode(out); err != nil {
				return nil, fmt.Errorf("%s %s: the answer is not the JSON expected: %v: %w", method, path, err, errdefs.ErrUnavailable)
			}
		}
		drain(resp)
		return resp.Header, nil
	}
}

// drain reads what is left of a small body so that its connection can be
// reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// retryAfter reads a Retry-After header given in seconds.
func retryAfter(h string) (time.Duration, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || n < 0 {
		return 0, false
	}
	return min(time.Duration(n)*time.Second, maxRetryWait), true
}

func sandboxPath(id, suffix string) string {
	return "/sandboxes/" + url.PathEscape(id) + suffix
}

// ceilSeconds turns d into whole seconds, rounding up, since the E2B API
// counts in seconds and a timeout must not shrink to zero.
func ceilSeconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}

// metadataQuery encodes a metadata filter the way the E2B JS SDK does:
// each key and value through encodeURIComponent, then joined as a query
// string (which the caller's url.Values escapes once more). Tupper reads
// this form back exactly, whatever the keys and values hold.
func metadataQuery(md map[string]string) string {
	v := url.Values{}
	for k, val := range md {
		v.Set(encodeURIComponent(k), encodeURIComponent(val))
	}
	return v.Encode()
}

// encodeURIComponent escapes s as JavaScript's encodeURIComponent does:
// everything but letters, digits and -_.!~*'() is percent-encoded.
func encodeURIComponent(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// serverStreams are the envd procedures whose request is one message
// answered by a stream.
var serverStreams = map[string]bool{
	"/process.Process/Start":          true,
	"/process.Process/Connect":        true,
	"/filesystem.Filesystem/WatchDir": true,
}

// maxStreamRequest bounds the request of a server stream that
// fixedLengthStreams reads whole: one message with a command line and its
// environment.
const maxStreamRequest = 4 << 20

// fixedLengthStreams sends the request of a server-streaming call with a
// Content-Length rather than chunked, as the E2B SDKs do. The Connect
// client writes that one message through a pipe, which HTTP/1.1 sends
// chunked; a reverse proxy in between (Go's httputil.ReverseProxy among
// them) may then still be reading the request's last chunk when the
// answer's headers are flushed, and with HTTP/1.1 that can cut the stream
// short. A request whose length is known is read whole before any answer.
type fixedLengthStreams struct {
	base http.RoundTripper
}

func (f fixedLengthStreams) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength > 0 || !serverStreams[req.URL.Path] {
		return f.base.RoundTrip(req)
	}
	// The Connect client closes the request side right after its one
	// message, so this read ends at once.
	body, err := io.ReadAll(io.LimitReader(req.Body, maxStreamRequest+1))
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	if len(body) > maxStreamRequest {
		return nil, fmt.Errorf("%s: request larger than %d bytes: %w", req.URL.Path, maxStreamRequest, errdefs.ErrInvalidArgument)
	}
	r := req.Clone(req.Context())
	r.ContentLength = int64(len(body))
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.TransferEncoding = nil
	return f.base.RoundTrip(r)
}
