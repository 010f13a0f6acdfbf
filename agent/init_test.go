package agent_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/agent"
	"github.com/lightbearco/tupper/agent/files"
	"github.com/lightbearco/tupper/internal/testutil"
)

const (
	oldToken = "old-token-0123456789abcdef"
	newToken = "new-token-0123456789abcdef"
)

// initAgent is an agent's handler served on loopback, with what /init
// passed on and where it writes the network files.
type initAgent struct {
	url       string
	root      string   // Network.Root
	rotations []string // the tokens TokenChanged got
}

// startInitAgent serves an agent whose token is token ("" for none) and
// whose network files, when withNetwork, live under a temporary root
// with the sandbox at 10.11.0.2.
func startInitAgent(t *testing.T, token string, withNetwork bool) *initAgent {
	t.Helper()
	a := &initAgent{root: t.TempDir()}
	cfg := agent.Config{
		DefaultUser:  "root",
		AccessToken:  token,
		TokenChanged: func(tok string) { a.rotations = append(a.rotations, tok) },
		Logger:       slog.New(slog.DiscardHandler),
	}
	if withNetwork {
		cfg.Network = &agent.Network{
			Root: a.root,
			Addr: netip.MustParseAddr("10.11.0.2"),
		}
	}
	h, err := agent.NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

// do sends a request with token in X-Access-Token (none when "") and
// returns the status and body.
func do(t *testing.T, method, u, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func (a *initAgent) init(t *testing.T, token, body string) (int, string) {
	t.Helper()
	return do(t, http.MethodPost, a.url+"/init", token, body)
}

// listStatus is the status of a process listing made with token.
func (a *initAgent) listStatus(t *testing.T, token string) int {
	t.Helper()
	status, _ := do(t, http.MethodPost, a.url+"/process.Process/List", token, "{}")
	return status
}

// files returns the network files under the agent's root, by name.
func (a *initAgent) files(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(a.root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[strings.TrimPrefix(p, a.root)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestInitRotatesToken(t *testing.T) {
	a := startInitAgent(t, oldToken, false)
	if status, body := a.init(t, oldToken, `{"accessToken":"`+newToken+`"}`); status != http.StatusNoContent {
		t.Fatalf("/init: %d %s, want 204", status, body)
	}
	if diff := cmp.Diff([]string{newToken}, a.rotations); diff != "" {
		t.Errorf("TokenChanged calls (-want +got):\n%s", diff)
	}

	t.Run("normal route", func(t *testing.T) {
		if got := a.listStatus(t, oldToken); got != http.StatusUnauthorized {
			t.Errorf("the old token: %d, want 401", got)
		}
		if got := a.listStatus(t, newToken); got != http.StatusOK {
			t.Errorf("the new token: %d, want 200", got)
		}
	})

	t.Run("init itself", func(t *testing.T) {
		if status, _ := a.init(t, oldToken, `{}`); status != http.StatusUnauthorized {
			t.Errorf("/init with the old token: %d, want 401", status)
		}
		if status, body := a.init(t, newToken, `{}`); status != http.StatusNoContent {
			t.Errorf("/init with the new token: %d %s, want 204", status, body)
		}
	})

	t.Run("signed files URL", func(t *testing.T) {
		testutil.RequiresRoot(t) // /files reads as the request's user
		p := filepath.Join(t.TempDir(), "f.txt")
		if err := os.WriteFile(p, []byte("content"), 0o644); err != nil {
			t.Fatal(err)
		}
		signed := func(token string) string {
			q := url.Values{"path": {p}, "signature": {files.Signature(p, "read", "", token, 0)}}
			return a.url + "/files?" + q.Encode()
		}
		if status, body := do(t, http.MethodGet, signed(oldToken), "", ""); status != http.StatusUnauthorized {
			t.Errorf("a URL signed with the old token: %d %s, want 401", status, body)
		}
		if status, body := do(t, http.MethodGet, signed(newToken), "", ""); status != http.StatusOK || body != "content" {
			t.Errorf("a URL signed with the new token: %d %s, want 200", status, body)
		}
	})
}

func TestInitRewritesNetwork(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	a := startInitAgent(t, oldToken, true)
	// Each step adds to what the previous ones wrote.
	steps := []struct {
		name string
		body string
		want map[string]string
	}{
		{
			name: "nameserver alone",
			body: `{"nameserver":"10.12.0.1"}`,
			want: map[string]string{
				"/etc/resolv.conf": "# Written by Tupper: the sandbox's resolver, which applies its network policy.\nnameserver 10.12.0.1\noptions edns0\n",
			},
		},
		{
			name: "address alone keeps the host name",
			body: `{"sandboxAddr":"10.12.0.2"}`,
			want: map[string]string{
				"/etc/hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n10.12.0.2\t" + host + "\n",
			},
		},
		{
			name: "host name alone keeps the address",
			body: `{"hostname":"fork-2"}`,
			want: map[string]string{
				"/etc/hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n10.12.0.2\tfork-2\n",
			},
		},
		{
			name: "all at once, IPv6",
			body: `{"nameserver":"fd12::1","sandboxAddr":"fd12::2","hostname":"fork-3","accessToken":"` + newToken + `"}`,
			want: map[string]string{
				"/etc/resolv.conf": "# Written by Tupper: the sandbox's resolver, which applies its network policy.\nnameserver fd12::1\noptions edns0\n",
				"/etc/hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfd12::2\tfork-3\n",
			},
		},
	}
	want := map[string]string{}
	for _, s := range steps {
		token := oldToken
		if len(a.rotations) > 0 {
			token = newToken
		}
		if status, body := a.init(t, token, s.body); status != http.StatusNoContent {
			t.Fatalf("%s: /init: %d %s, want 204", s.name, status, body)
		}
		for k, v := range s.want {
			want[k] = v
		}
		// Only the two files: the trusted CA is not written again.
		if diff := cmp.Diff(want, a.files(t)); diff != "" {
			t.Errorf("%s: files (-want +got):\n%s", s.name, diff)
		}
	}
	if diff := cmp.Diff([]string{newToken}, a.rotations); diff != "" {
		t.Errorf("TokenChanged calls (-want +got):\n%s", diff)
	}
}

// TestInitRefuses checks that /init refuses what it cannot do, says why,
// and changes nothing: the old token still opens the agent, no file is
// written, nothing is passed on.
func TestInitRefuses(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		token   string // default: the agent's
		body    string
		noNet   bool // the agent does not own the network files
		noToken bool // the agent runs without a token
		want    int
	}{
		{name: "malformed JSON", body: `{"accessToken":`, want: 400},
		{name: "empty body", body: ``, want: 400},
		{name: "not an object", body: `["` + newToken + `"]`, want: 400},
		{name: "unknown field", body: `{"accessToken":"` + newToken + `","defaultUser":"root"}`, want: 400},
		{name: "bad variable name", body: `{"envVars":{"1X":"v"}}`, want: 400},
		{name: "reserved variable", body: `{"envVars":{"TUPPER_ACCESS_TOKEN":"x"}}`, want: 400},
		{name: "NUL in a value", body: `{"envVars":{"X":"a\u0000b"}}`, want: 400},
		{name: "field of the wrong type", body: `{"nameserver":10}`, want: 400},
		{name: "trailing data", body: `{"accessToken":"` + newToken + `"} {}`, want: 400},
		{name: "over 64 KiB", body: `{"hostname":"` + strings.Repeat("a", 64<<10) + `"}`, want: 400},
		{name: "empty token", body: `{"accessToken":""}`, want: 400},
		{name: "short token", body: `{"accessToken":"0123456789abcde"}`, want: 400},
		{name: "long token", body: `{"accessToken":"` + strings.Repeat("t", 513) + `"}`, want: 400},
		{name: "token with a space", body: `{"accessToken":"0123456789 abcdef"}`, want: 400},
		{name: "token with a newline", body: `{"accessToken":"0123456789\nabcdef"}`, want: 400},
		{name: "nameserver not an address", body: `{"nameserver":"resolver.local"}`, want: 400},
		{name: "empty nameserver", body: `{"nameserver":""}`, want: 400},
		{name: "unspecified address", body: `{"sandboxAddr":"0.0.0.0"}`, want: 400},
		{name: "multicast nameserver", body: `{"nameserver":"ff02::1"}`, want: 400},
		{name: "address with a zone", body: `{"sandboxAddr":"fe80::1%eth0"}`, want: 400},
		{name: "address with a prefix", body: `{"sandboxAddr":"10.0.0.2/24"}`, want: 400},
		{name: "host name with a space", body: `{"hostname":"a b"}`, want: 400},
		{name: "host name with a newline", body: `{"hostname":"a\n10.0.0.9 evil"}`, want: 400},
		{name: "host name too long", body: `{"hostname":"` + strings.Repeat("a", 65) + `"}`, want: 400},
		{name: "host name label starting with -", body: `{"hostname":"a.-b"}`, want: 400},
		{name: "empty host name", body: `{"hostname":""}`, want: 400},
		{name: "good token, bad address", body: `{"accessToken":"` + newToken + `","nameserver":"10.0.0.1","sandboxAddr":"nope"}`, want: 400},
		{name: "without the token", token: "-", body: `{"accessToken":"` + newToken + `"}`, want: 401},
		{name: "with a wrong token", token: "wrong-token-0123456789", body: `{"accessToken":"` + newToken + `"}`, want: 401},
		{name: "GET", method: http.MethodGet, want: 405},
		{name: "network not the agent's", noNet: true, body: `{"accessToken":"` + newToken + `","nameserver":"10.0.0.1"}`, want: 409},
		{name: "no token to replace", noToken: true, token: "-", body: `{"accessToken":"` + newToken + `"}`, want: 409},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agentToken := oldToken
			if tt.noToken {
				agentToken = ""
			}
			a := startInitAgent(t, agentToken, !tt.noNet)
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			token := tt.token
			switch token {
			case "":
				token = agentToken
			case "-":
				token = ""
			}
			status, body := do(t, method, a.url+"/init", token, tt.body)
			if status != tt.want {
				t.Fatalf("%d %s, want %d", status, body, tt.want)
			}
			if status == 400 || status == 409 {
				var e struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code != status || e.Message == "" {
					t.Errorf("body %q: want a JSON error with a message", body)
				}
				if strings.Contains(body, newToken) {
					t.Errorf("the error repeats the token: %s", body)
				}
			}
			if got := a.listStatus(t, agentToken); got != http.StatusOK {
				t.Errorf("the agent's token no longer opens it: %d", got)
			}
			if !tt.noToken {
				if got := a.listStatus(t, newToken); got != http.StatusUnauthorized {
					t.Errorf("the refused token opens the agent: %d", got)
				}
			}
			if len(a.rotations) != 0 {
				t.Errorf("%d tokens passed on", len(a.rotations))
			}
			if f := a.files(t); len(f) != 0 {
				t.Errorf("files written: %v", f)
			}
		})
	}
}

// TestInitAddsEnvironment checks that /init's envVars join the
// environment the agent reports (/envs) and gives the commands to come,
// replacing variables of the same names: a sandbox from a warm pool gets
// its create's environment so.
func TestInitAddsEnvironment(t *testing.T) {
	a := startInitAgent(t, oldToken, false)
	if status, body := a.init(t, oldToken, `{"envVars":{"GREETING":"hello","PATH":"/opt/bin:/usr/bin:/bin"}}`); status != http.StatusNoContent {
		t.Fatalf("/init: %d %s, want 204", status, body)
	}
	req, _ := http.NewRequest(http.MethodGet, a.url+"/envs", nil)
	req.Header.Set("X-Access-Token", oldToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatal(err)
	}
	if env["GREETING"] != "hello" || env["PATH"] != "/opt/bin:/usr/bin:/bin" {
		t.Errorf("/envs after /init: %v", env)
	}
}
