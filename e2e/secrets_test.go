package e2e

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// TestSecrets checks secrets end to end with the published e2b SDK
// (e2b/secrets.mjs) against a real `tupper serve` and the fake internet:
// a secret named by a sandbox's network rule reaches the upstream as the
// rule's header, at its current value, and appears nowhere in the sandbox,
// in the daemon's answers, its log or its state on disk; a deleted secret
// fails the request in the proxy before it leaves; another team's key
// neither sees nor uses the secret.
func TestSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes")
	}
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	npmCI(t, dir)
	fake, caFile := startFakeInternet(t)
	d := startServeDaemon(t, "--dns-upstream", fake.DNS.String(), "--upstream-ca", caFile)
	blue := d.addKey(t, "--team", "blue", "--name", "blue")
	name := "e2e-" + randomHex(t)[:8]
	value1, value2 := "tupper-secret-"+randomHex(t), "tupper-secret-"+randomHex(t)

	runScript(t, node, dir, d, "secrets.mjs", "e2b@2.51.0",
		"SECRET_NAME="+name, "SECRET1="+value1, "SECRET2="+value2, "BLUE_KEY="+blue, "FAKE_B="+fake.HostB.String())

	// What the fake internet got: each request at the value of its time,
	// for the rule's host only, the sandbox's own header replaced; the
	// request after the delete never arrived; no request anywhere carried
	// a value or a placeholder otherwise.
	want := map[string]string{
		"/secret-1": "Bearer " + value1, "/secret-2": "Bearer " + value2, "/secret-2b": "Bearer " + value2, "/secret-2c": "Bearer " + value2,
		"/secret-plain": "from-the-sandbox",
	}
	got := map[string]string{}
	for _, r := range fake.Requests() {
		if strings.HasPrefix(r.Path, "/secret-") {
			got[r.Path] = r.Header.Get("X-Api-Key")
			if r.Path != "/secret-plain" && (r.SNI != "api.allowed.test" || r.Host != "api.allowed.test") {
				t.Errorf("%s reached %s with SNI %q and Host %q", r.Path, r.Server, r.SNI, r.Host)
			}
			if vs := r.Header.Values("X-Api-Key"); len(vs) != 1 {
				t.Errorf("%s carried X-Api-Key %q, want the rule's alone", r.Path, vs)
			}
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, "${") || (k != "X-Api-Key" && (strings.Contains(v, value1) || strings.Contains(v, value2))) {
					t.Errorf("%s: header %s: %q", r.Path, k, v)
				}
			}
		}
	}
	for path, w := range want {
		if got[path] != w {
			t.Errorf("%s reached the upstream with X-Api-Key %q, want the secret's value of its time", path, got[path])
		}
	}
	for _, path := range []string{"/secret-3", "/secret-stolen-1", "/secret-stolen-2"} {
		if _, ok := got[path]; ok {
			t.Errorf("%s reached the upstream", path)
		}
	}

	// A daemon killed and started again resolves the secrets of the
	// rules of the sandboxes it re-attaches to, through its new engine.
	t.Run("restart", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		client := func() *sdk.Client {
			tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: d.URL, APIKey: d.Key})
			if err != nil {
				t.Fatal(err)
			}
			return &sdk.Client{Transport: tr}
		}
		if _, err := client().CreateSecret(ctx, name+"-r", value1, nil); err != nil {
			t.Fatal(err)
		}
		sb, err := client().Create(ctx, sdk.CreateOptions{Network: &sdk.NetworkPolicy{
			AllowOut: []string{"api.allowed.test"}, DenyOut: []string{sdk.DenyAllTraffic},
			Rules: map[string][]sdk.NetworkRule{"api.allowed.test": {{Transform: &sdk.NetworkTransform{
				Headers: map[string]string{"X-Api-Key": "Bearer " + sdk.SecretPlaceholder(name+"-r")}}}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		id := sb.ID()
		d.crash(t)
		d.start(t)
		sb, err = client().Connect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Kill(context.WithoutCancel(ctx))
		if res, err := sb.Commands.Run(ctx, "curl -sS --max-time 20 https://api.allowed.test/secret-after-restart"); err != nil || !strings.Contains(res.Stdout, "hello from") {
			t.Fatalf("after the restart: %+v, %v", res, err)
		}
		found := false
		for _, r := range fake.Requests() {
			if r.Path == "/secret-after-restart" {
				found = r.Header.Get("X-Api-Key") == "Bearer "+value1
			}
		}
		if !found {
			t.Error("after the restart the request did not reach the upstream with the secret's value")
		}
		if err := client().DeleteSecret(ctx, name+"-r"); err != nil {
			t.Error(err)
		}
	})

	// The CLI lists the team's secrets (none left) and the daemon's log
	// and state hold no value.
	if out := newTupperCLI(t, d, d.Key).ok(t, nil, "secret", "ls"); strings.Contains(out, name) {
		t.Errorf("tupper secret ls after the deletion:\n%s", out)
	}
	if strings.Contains(d.log(), value1) || strings.Contains(d.log(), value2) {
		t.Error("the daemon's log holds a secret's value")
	}
	searchState(t, d.Root, value1, value2)
}

// searchState fails t when a file under root holds one of values: the
// daemon keeps secrets sealed (and a sandbox's files, under root too,
// must not hold them either).
func searchState(t *testing.T, root string, values ...string) {
	t.Helper()
	searched := 0
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // a sandbox's files may go as they are walked
		}
		if !e.Type().IsRegular() {
			return nil
		}
		if fi, err := e.Info(); err != nil || fi.Size() > 256<<20 {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		searched++
		for _, v := range values {
			if bytes.Contains(data, []byte(v)) {
				t.Errorf("%s holds a secret's value", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "secrets", "secrets.db")); err != nil || searched == 0 {
		t.Errorf("the daemon's state has no secret database to search (%v), or nothing was searched (%d files)", err, searched)
	}
}
