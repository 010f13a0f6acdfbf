package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/internal/localsock"
	"github.com/lightbearco/tupper/sdk"
	"github.com/lightbearco/tupper/server"
)

// This file is the plumbing shared by the commands that are clients of a
// running `tupper serve` (create, ls, info, exec, run-code, shell, cp, read,
// write, kill, timeout): where the daemon is, which key opens it, and errors
// that say what to do. On the daemon's own host they reach it through its
// local socket, with no key (see package localsock).

// defaultAPIURL is where `tupper serve` listens unless told otherwise.
const defaultAPIURL = "http://" + server.DefaultAddr

// apiOptions are the flags that say how to reach `tupper serve`.
type apiOptions struct {
	url string
	key string
	// root returns --root, whose daemon's local socket is used when no
	// URL is given; nil means none was given.
	root func() string
}

func addAPIFlags(cmd *cobra.Command, o *apiOptions) {
	f := cmd.Flags()
	f.StringVar(&o.url, "api-url", "", "URL of `tupper serve`, http(s):// or unix:// (default $TUPPER_API_URL, else $E2B_API_URL, else the socket of --root's daemon when it exists, else "+defaultAPIURL+")")
	f.StringVar(&o.key, "api-key", "", "API key (default $TUPPER_API_KEY, else $E2B_API_KEY; make one with `tupper keys create`; none is needed on the daemon's socket as root or group "+localsock.Group+")")
	// --root is the root command's persistent flag, parsed by the time
	// the command runs.
	o.root = func() string {
		if fl := cmd.Flag("root"); fl != nil {
			return fl.Value.String()
		}
		return ""
	}
}

// rootDir is the state root whose daemon's socket the options look for:
// --root, else $TUPPER_ROOT, else the default root.
func (o *apiOptions) rootDir() string {
	if o.root == nil {
		return ""
	}
	return o.root()
}

// config resolves where the daemon is and which key opens it: the flags,
// then TUPPER_API_URL/TUPPER_API_KEY, then E2B_API_URL/E2B_API_KEY (with
// E2B_SANDBOX_URL), then the default address.
func (o *apiOptions) config() sdk.HTTPConfig {
	cfg := sdk.HTTPConfigFromEnv()
	if o.url != "" {
		// A URL given on the command line serves both planes, as
		// `tupper serve` does: a data-plane URL from the environment
		// belongs to another endpoint.
		cfg.APIURL, cfg.SandboxURL = o.url, ""
	}
	if cfg.APIURL == "" {
		cfg.APIURL = defaultAPIURL
	}
	if o.key != "" {
		cfg.APIKey = o.key
	}
	return cfg
}

// target is config with the local socket in the default's place: the
// socket of --root's daemon, when it exists, is used before the default
// address.
func (o *apiOptions) target() sdk.HTTPConfig {
	cfg := sdk.HTTPConfigFromEnv()
	if o.url == "" && cfg.APIURL == "" {
		if p := localsock.Of(o.rootDir()); localsock.Exists(p) {
			cfg.APIURL = localsock.URL(p)
			if o.key != "" {
				cfg.APIKey = o.key
			}
			return cfg
		}
	}
	return o.config()
}

// remote is a client of a running `tupper serve`.
type remote struct {
	*sdk.Client
	url    string
	hasKey bool
	// socket is the path of the local socket the client uses; "" over
	// TCP.
	socket string
}

// dial returns a client of the daemon the options name. It makes no
// request.
func (o *apiOptions) dial() (*remote, error) {
	cfg := o.target()
	t, err := sdk.NewHTTPTransport(cfg)
	if err != nil {
		return nil, fmt.Errorf("--api-url: %w", err)
	}
	socket, _ := localsock.FromURL(cfg.APIURL)
	return &remote{Client: &sdk.Client{Transport: t}, url: t.APIURL(), hasKey: cfg.APIKey != "", socket: socket}, nil
}

// unreached turns an error of reaching the daemon into one that says what
// to do, and returns nil for other errors.
func (r *remote) unreached(err error) error {
	switch {
	case r.socket != "" && denied(err):
		return socketDenied(r.socket)
	case r.socket != "" && (unreachable(err) || errors.Is(err, syscall.ENOENT)):
		return fmt.Errorf("cannot reach tupper serve's socket %s: nothing listens on it; start it with `tupper serve` (or point --api-url or TUPPER_API_URL at a daemon elsewhere)", r.socket)
	case unreachable(err):
		return fmt.Errorf("cannot reach tupper at %s: start it with `tupper serve` (or point --api-url or TUPPER_API_URL at it)", r.url)
	}
	return nil
}

// socketDenied is the error of a local socket the user may not connect to.
func socketDenied(path string) error {
	return fmt.Errorf("cannot reach tupper serve's socket %s: permission denied; run as root or join the %s group (or set TUPPER_API_URL and TUPPER_API_KEY)", path, localsock.Group)
}

// denied reports whether err means the caller may not connect.
func denied(err error) bool {
	return errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}

// control turns an error of a control-plane call about sandbox id (empty
// when none) into one that says what to do.
func (r *remote) control(err error, id string) error {
	switch {
	case err == nil:
		return nil
	case r.unreached(err) != nil:
		return r.unreached(err)
	case sdk.IsUnauthenticated(err) && !r.hasKey:
		return fmt.Errorf("tupper at %s needs an API key: make one with `tupper keys create` and pass it with --api-key or TUPPER_API_KEY (on the daemon's host, root and group %s need none)", r.url, localsock.Group)
	case sdk.IsUnauthenticated(err):
		return fmt.Errorf("tupper at %s refused the API key: check --api-key or TUPPER_API_KEY against `tupper keys ls`, or make one with `tupper keys create`", r.url)
	case id != "" && sdk.IsNotFound(err):
		return fmt.Errorf("sandbox %s not found: run `tupper ls` to see the running ones", id)
	}
	return err
}

// data turns an error of a data-plane call (commands, files) in sandbox id
// into one that says what to do. An unavailable sandbox is looked up: one
// the daemon no longer knows was killed or timed out.
func (r *remote) data(ctx context.Context, err error, id string) error {
	switch {
	case err == nil:
		return nil
	case r.unreached(err) != nil:
		return r.unreached(err)
	case sdk.IsUnavailable(err) && ctx.Err() == nil:
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, gerr := r.GetInfo(lctx, id); sdk.IsNotFound(gerr) {
			return fmt.Errorf("sandbox %s is not running any more (killed or timed out): run `tupper ls` to see the running ones", id)
		}
	}
	return err
}

// connect returns sandbox id, ready for commands and files.
func (r *remote) connect(ctx context.Context, id string) (*sdk.Sandbox, error) {
	sb, err := r.Connect(ctx, id)
	return sb, r.control(err, id)
}

// sandbox dials the daemon and connects to sandbox id: what every command
// about one sandbox does first.
func (o *apiOptions) sandbox(ctx context.Context, id string) (*remote, *sdk.Sandbox, error) {
	r, err := o.dial()
	if err != nil {
		return nil, nil, err
	}
	sb, err := r.connect(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return r, sb, nil
}

// asUser is the file option for --user; none when it is empty.
func asUser(user string) []sdk.FileOption {
	if user == "" {
		return nil
	}
	return []sdk.FileOption{sdk.WithUser(user)}
}

// unreachable reports whether err means nothing answered at the daemon's
// address.
func unreachable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ECONNRESET)
}

// sandboxJSON is how the CLI prints a sandbox with --json: the E2B API's
// field names, without the access token.
type sandboxJSON struct {
	SandboxID           string             `json:"sandboxID"`
	TemplateID          string             `json:"templateID"`
	Alias               string             `json:"alias,omitempty"`
	State               string             `json:"state"`
	Metadata            map[string]string  `json:"metadata"`
	StartedAt           time.Time          `json:"startedAt"`
	EndAt               time.Time          `json:"endAt"`
	CPUCount            int                `json:"cpuCount"`
	MemoryMB            int                `json:"memoryMB"`
	DiskSizeMB          int                `json:"diskSizeMB"`
	EnvdVersion         string             `json:"envdVersion"`
	Network             *sdk.NetworkPolicy `json:"network,omitempty"`
	AllowInternetAccess *bool              `json:"allowInternetAccess,omitempty"`
	Backend             string             `json:"backend,omitempty"`
}

func toJSON(info *sdk.SandboxInfo) sandboxJSON {
	md := info.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return sandboxJSON{
		SandboxID: info.SandboxID, TemplateID: info.TemplateID, Alias: info.Alias, State: info.State, Metadata: md,
		StartedAt: info.StartedAt, EndAt: info.EndAt, CPUCount: info.CPUCount, MemoryMB: info.MemoryMB,
		DiskSizeMB: info.DiskSizeMB, EnvdVersion: info.EnvdVersion,
		Network: info.Network, AllowInternetAccess: info.AllowInternetAccess, Backend: info.Backend,
	}
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// formatPairs writes a map as sorted k=v pairs.
func formatPairs(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + m[k]
	}
	return strings.Join(out, ",")
}

// exitCode is the exit status the CLI passes on for a command's result: its
// code, or 1 when a signal ended it (the agent reports -1).
func exitCode(res *sdk.CommandResult) int {
	if res.ExitCode < 0 || res.ExitCode > 255 {
		return 1
	}
	return res.ExitCode
}
