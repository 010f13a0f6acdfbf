package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

func clearAPIEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{sdk.EnvAPIURL, sdk.EnvAPIKey, sdk.EnvSandboxURL, sdk.EnvE2BAPIURL, sdk.EnvE2BAPIKey, sdk.EnvE2BSandboxURL} {
		t.Setenv(k, "")
	}
}

func TestAPIConfig(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		opts apiOptions
		want sdk.HTTPConfig
	}{
		{name: "defaults", want: sdk.HTTPConfig{APIURL: "http://127.0.0.1:3000"}},
		{
			name: "tupper env",
			env:  map[string]string{sdk.EnvAPIURL: "http://t:1", sdk.EnvAPIKey: "kt", sdk.EnvE2BAPIURL: "http://e:1"},
			want: sdk.HTTPConfig{APIURL: "http://t:1", APIKey: "kt"},
		},
		{
			name: "e2b env",
			env:  map[string]string{sdk.EnvE2BAPIURL: "http://e:1", sdk.EnvE2BSandboxURL: "http://es:1", sdk.EnvE2BAPIKey: "ke"},
			want: sdk.HTTPConfig{APIURL: "http://e:1", SandboxURL: "http://es:1", APIKey: "ke"},
		},
		{
			name: "flags win",
			env:  map[string]string{sdk.EnvE2BAPIURL: "http://e:1", sdk.EnvE2BSandboxURL: "http://es:1", sdk.EnvE2BAPIKey: "ke"},
			opts: apiOptions{url: "http://f:1", key: "kf"},
			want: sdk.HTTPConfig{APIURL: "http://f:1", APIKey: "kf"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearAPIEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if d := cmp.Diff(tt.want, tt.opts.config()); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
		})
	}
}

func TestParseCopyArg(t *testing.T) {
	tests := []struct {
		arg    string
		want   sandboxPath
		remote bool
	}{
		{arg: "abc123:/home/user/x", want: sandboxPath{id: "abc123", path: "/home/user/x"}, remote: true},
		{arg: "abc-1:rel/x", want: sandboxPath{id: "abc-1", path: "rel/x"}, remote: true},
		{arg: "abc:", want: sandboxPath{id: "abc"}, remote: true},
		{arg: "./abc:x"},
		{arg: "/tmp/a:b"},
		{arg: "file.txt"},
		{arg: "Upper:x"},
		{arg: "dir/a:b"},
		{arg: ":x"},
	}
	for _, tt := range tests {
		got, remote := parseCopyArg(tt.arg)
		if remote != tt.remote || got != tt.want {
			t.Errorf("parseCopyArg(%q) = %+v, %v; want %+v, %v", tt.arg, got, remote, tt.want, tt.remote)
		}
	}
}

func TestParseSeconds(t *testing.T) {
	good := map[string]time.Duration{"60": time.Minute, "1": time.Second, "2h": 2 * time.Hour, "90s": 90 * time.Second}
	for in, want := range good {
		if got, err := parseSeconds(in); err != nil || got != want {
			t.Errorf("parseSeconds(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "-5", "x", "-1m", ""} {
		if _, err := parseSeconds(in); err == nil {
			t.Errorf("parseSeconds(%q) succeeded", in)
		}
	}
}

func TestUntil(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := map[time.Duration]string{
		10 * time.Second:                      "10s",
		5 * time.Minute:                       "5m",
		time.Hour:                             "1h",
		time.Hour + 30*time.Minute:            "1h30m",
		4*time.Minute + 59*time.Second:        "4m59s",
		time.Hour + 10*time.Second:            "1h0m10s",
		10*time.Minute + 100*time.Millisecond: "10m",
		-time.Second:                          "now",
	}
	for d, want := range tests {
		if got := until(now, now.Add(d)); got != want {
			t.Errorf("until(+%v) = %q, want %q", d, got, want)
		}
	}
	if got := until(now, time.Time{}); got != "-" {
		t.Errorf("until(zero) = %q", got)
	}
}

// TestClientErrors checks that the commands' errors say what to do.
func TestClientErrors(t *testing.T) {
	clearAPIEnv(t)
	ctx := context.Background()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Header.Get("X-Api-Key") == "":
			w.WriteHeader(401)
			fmt.Fprint(w, `{"code":401,"message":"missing X-API-KEY header"}`)
		case r.Header.Get("X-Api-Key") != "e2b_good":
			w.WriteHeader(401)
			fmt.Fprint(w, `{"code":401,"message":"invalid API key"}`)
		default:
			w.WriteHeader(404)
			fmt.Fprint(w, `{"code":404,"message":"sandbox \"sb1\": not found"}`)
		}
	}))
	defer srv.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()

	tests := []struct {
		name string
		api  apiOptions
		want string
	}{
		{name: "unreachable", api: apiOptions{url: dead.URL}, want: "cannot reach tupper at " + dead.URL + ": start it with `tupper serve`"},
		{name: "no key", api: apiOptions{url: srv.URL}, want: "needs an API key: make one with `tupper keys create`"},
		{name: "wrong key", api: apiOptions{url: srv.URL, key: "e2b_bad"}, want: "refused the API key"},
		{name: "unknown sandbox", api: apiOptions{url: srv.URL, key: "e2b_good"}, want: "sandbox sb1 not found: run `tupper ls`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			g := &globals{stdout: &stdout, stderr: &stderr}
			err := runInfo(ctx, g, &infoOptions{api: tt.api, id: "sb1"})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("info: err = %v, want it to say %q", err, tt.want)
			}
			var ee *exitError
			err = runKill(ctx, g, &killOptions{api: tt.api, ids: []string{"sb1"}})
			if tt.name == "unknown sandbox" {
				if !errors.As(err, &ee) || !strings.Contains(stderr.String(), tt.want) {
					t.Errorf("kill: err = %v, stderr %q; want exit 1 saying %q", err, stderr.String(), tt.want)
				}
			} else if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("kill: err = %v, want it to say %q", err, tt.want)
			}
		})
	}
	// The class of an error the commands do not explain stays.
	r := &remote{url: "x", hasKey: true}
	if err := r.control(fmt.Errorf("boom: %w", errdefs.ErrInvalidArgument), "sb1"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("control kept %v", err)
	}
}
