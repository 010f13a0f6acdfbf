package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/secret"
)

// syncBuffer is a log sink the test reads while the server writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// secretEnv is a testEnv whose engine keeps secrets, with a second key in
// team blue, and everything the engine and server log at debug level.
type secretEnv struct {
	*testEnv
	blue string
	log  *syncBuffer
}

func newSecretEnv(t *testing.T) *secretEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st, err := secret.Open(secret.Config{Dir: filepath.Join(dir, "secrets")})
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBackend{sandboxes: map[string]*fakeSandbox{}}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(ctx, engine.Config{
		Root: filepath.Join(dir, "engine"), Backend: fb, BackendName: "fake",
		Images: fakeImages{rootfs: dir}, AgentPath: exe, Logger: logger, Secrets: st,
	})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.Open(filepath.Join(dir, "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := keys.Create(ctx, "red")
	if err != nil {
		t.Fatal(err)
	}
	blue, _, err := keys.CreateInTeam(ctx, "blue", "blue")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Engine: eng, Keys: keys, Domain: "tupper.test", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
		eng.KillAll(context.Background())
		eng.Close()
		keys.Close()
		st.Close()
		fb.stopAll()
	})
	return &secretEnv{testEnv: &testEnv{t: t, backend: fb, engine: eng, server: srv, http: hs, key: key}, blue: blue, log: logs}
}

// secretAnswer decodes a secret as the API answers it, and fails the test
// when the answer has a field beyond E2B's Secret schema.
func secretAnswer(t *testing.T, data []byte) secretJSON {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatalf("answer %s: %v", data, err)
	}
	for k := range fields {
		switch k {
		case "secretID", "name", "currentVersion", "metadata", "createdAt", "updatedAt":
		default:
			t.Errorf("a secret's answer has field %q: %s", k, data)
		}
	}
	var s secretJSON
	json.Unmarshal(data, &s)
	return s
}

func TestSecretsAPI(t *testing.T) {
	e := newSecretEnv(t)
	const v1, v2 = "sk-first-value-7f3a", "sk-second-value-9c1d"
	var answers []string
	do := func(method, path, body string) (int, http.Header, []byte) {
		t.Helper()
		status, h, data := e.do(method, path, body)
		answers = append(answers, string(data))
		return status, h, data
	}

	status, _, data := do("POST", "/secrets", `{"name":"OpenAI-Key","value":"`+v1+`","metadata":{"owner":"ops"}}`)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, data)
	}
	s := secretAnswer(t, data)
	if !strings.HasPrefix(s.SecretID, secret.IDPrefix) || s.Name != "openai-key" || s.CurrentVersion != 1 || s.Metadata["owner"] != "ops" || s.CreatedAt == "" || s.UpdatedAt == "" {
		t.Errorf("create answered %s", data)
	}
	if status, _, data := do("POST", "/secrets", `{"name":"openai-key","value":"x"}`); status != http.StatusConflict {
		t.Errorf("a second secret of the name: %d %s", status, data)
	}
	for _, ref := range []string{s.SecretID, "openai-key", "OPENAI-KEY"} {
		if status, _, data := do("GET", "/secrets/"+url.PathEscape(ref), ""); status != http.StatusOK || secretAnswer(t, data).SecretID != s.SecretID {
			t.Errorf("get %s: %d %s", ref, status, data)
		}
	}
	status, _, data = do("POST", "/secrets/openai-key", `{"value":"`+v2+`"}`)
	if up := secretAnswer(t, data); status != http.StatusOK || up.CurrentVersion != 2 || up.Metadata["owner"] != "ops" {
		t.Errorf("update: %d %s; want version 2 with the metadata kept", status, data)
	}
	status, _, data = do("POST", "/secrets/"+s.SecretID, `{"value":"`+v2+`","metadata":{}}`)
	if up := secretAnswer(t, data); status != http.StatusOK || up.CurrentVersion != 3 || len(up.Metadata) != 0 {
		t.Errorf("update with empty metadata: %d %s", status, data)
	}

	// Pages, by X-Next-Token.
	for _, n := range []string{"b", "c"} {
		if status, _, data := do("POST", "/secrets", `{"name":"`+n+`","value":"v"}`); status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", n, status, data)
		}
	}
	var names []string
	for q := "/secrets?limit=2"; ; {
		status, h, data := do("GET", q, "")
		if status != http.StatusOK {
			t.Fatalf("list: %d %s", status, data)
		}
		var page []secretJSON
		json.Unmarshal(data, &page)
		for _, p := range page {
			names = append(names, p.Name)
		}
		next := h.Get("X-Next-Token")
		if next == "" {
			break
		}
		q = "/secrets?limit=2&nextToken=" + url.QueryEscape(next)
	}
	if strings.Join(names, ",") != "openai-key,b,c" {
		t.Errorf("listed %v", names)
	}
	if status, _, _ := do("GET", "/secrets?limit=0", ""); status != http.StatusBadRequest {
		t.Errorf("limit 0: %d", status)
	}

	if status, _, data := do("DELETE", "/secrets/openai-key", ""); status != http.StatusNoContent {
		t.Errorf("delete: %d %s", status, data)
	}
	for _, m := range []string{"GET", "DELETE"} {
		if status, _, data := do(m, "/secrets/"+s.SecretID, ""); status != http.StatusNotFound {
			t.Errorf("%s after delete: %d %s", m, status, data)
		}
	}
	if status, _, _ := do("POST", "/secrets/"+s.SecretID, `{"value":"x"}`); status != http.StatusNotFound {
		t.Errorf("update after delete: %d", status)
	}
	if status, h, _ := do("PUT", "/secrets", ""); status != http.StatusMethodNotAllowed || !strings.Contains(h.Get("Allow"), "POST") {
		t.Errorf("PUT /secrets: %d, Allow %q", status, h.Get("Allow"))
	}

	// Neither value is in any answer or in the debug log.
	for _, v := range []string{v1, v2} {
		for _, a := range answers {
			if strings.Contains(a, v) {
				t.Errorf("an answer holds a value: %s", a)
			}
		}
		if strings.Contains(e.log.String(), v) {
			t.Errorf("the log holds a value:\n%s", e.log.String())
		}
	}
}

// TestSecretsRefuseBadBodies checks that a body that is not a secret is
// refused with 400, and that the refusal never quotes what it was sent.
func TestSecretsRefuseBadBodies(t *testing.T) {
	e := newSecretEnv(t)
	const marker = "zz-private-value"
	for _, body := range []string{
		`{"name":"a","value":"` + marker,           // not closed
		`{"name":"a","value":"` + marker + `\q"}`,  // a bad escape
		`{"name":"a","value":"` + marker + "\n\"}", // a raw line break
		`{"name":"a","value":["` + marker + `"]}`,
		`{"name":"a","value":"` + marker + `\r\nX-Evil: 1"}`, // valid JSON, not a header value
		`{"name":"a","value":"` + marker + `"} {"again":1}`,
		`{"name":"a{b}","value":"` + marker + `"}`,
		`{"name":"a","value":""}`,
		`{"name":"sec_a","value":"` + marker + `"}`,
	} {
		status, _, data := e.do("POST", "/secrets", body)
		if status != http.StatusBadRequest {
			t.Errorf("POST %q: %d %s, want 400", body, status, data)
		}
		var ae apiError
		if err := json.Unmarshal(data, &ae); err != nil || ae.Code != 400 || ae.Message == "" {
			t.Errorf("POST %q: body %s, want {code: 400, message}", body, data)
		}
		if strings.Contains(string(data), "zz-") {
			t.Errorf("POST %q: the refusal quotes the body: %s", body, data)
		}
	}
	if strings.Contains(e.log.String(), "zz-") {
		t.Errorf("the log quotes a refused body:\n%s", e.log.String())
	}
	if list, _, _ := e.engine.ListSecrets(context.Background(), 0, ""); len(list) != 0 {
		t.Errorf("refused bodies made secrets: %v", list)
	}
}

// TestSecretsAreTheTeams checks that another team's key sees none of a
// team's secrets, gets the answers of one that does not exist, and cannot
// name one in its sandboxes' rules.
func TestSecretsAreTheTeams(t *testing.T) {
	e := newSecretEnv(t)
	status, _, data := e.do("POST", "/secrets", `{"name":"token","value":"sk-red"}`)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, data)
	}
	red := secretAnswer(t, data)
	for _, rt := range []struct{ method, path, body string }{
		{"GET", "/secrets/%s", ""},
		{"POST", "/secrets/%s", `{"value":"sk-blue"}`},
		{"DELETE", "/secrets/%s", ""},
	} {
		for _, ref := range []string{red.SecretID, "token"} {
			wantStatus, _, wantBody := e.doKey(e.blue, rt.method, fmt.Sprintf(rt.path, "nosuch"), rt.body)
			status, _, got := e.doKey(e.blue, rt.method, fmt.Sprintf(rt.path, ref), rt.body)
			if status != http.StatusNotFound || status != wantStatus ||
				strings.ReplaceAll(string(got), ref, "REF") != strings.ReplaceAll(string(wantBody), "nosuch", "REF") {
				t.Errorf("blue %s %s: %d %s; for an unknown secret %d %s", rt.method, ref, status, got, wantStatus, wantBody)
			}
		}
	}
	if status, _, data := e.doKey(e.blue, "GET", "/secrets", ""); status != http.StatusOK || string(bytes.TrimSpace(data)) != "[]" {
		t.Errorf("blue lists: %d %s", status, data)
	}
	// Blue may have a secret of the same name: its own.
	if status, _, data := e.doKey(e.blue, "POST", "/secrets", `{"name":"token","value":"sk-blue"}`); status != http.StatusCreated || strings.Contains(string(data), red.SecretID) {
		t.Errorf("blue's own token: %d %s", status, data)
	}
	// Blue's rules name blue's secrets: red's id is no name, and a
	// reference by hand is refused.
	for _, v := range []string{"${e2b.secrets." + red.SecretID + "x}", netpolicy.SecretRef(red.SecretID)} {
		body := `{"templateID":"base","network":{"rules":{"api.example.com":[{"transform":{"headers":{"X-Key":"` + v + `"}}}]}}}`
		if status, _, data := e.doKey(e.blue, "POST", "/v2/sandboxes", body); status != http.StatusBadRequest {
			t.Errorf("blue's create with %s: %d %s, want 400", v, status, data)
		}
	}
	if v, err := e.engine.SecretValue(context.Background(), "nosuchsandbox", red.SecretID); err == nil || v != "" {
		t.Errorf("the resolver for an unknown sandbox: %q, %v", v, err)
	}
}

// TestSandboxRulesNameSecrets checks a sandbox whose rules use a secret
// through the API: the backend and every answer hold a reference or
// "[redacted]", never the value; an unknown name is refused at create and
// at update, saying which.
func TestSandboxRulesNameSecrets(t *testing.T) {
	e := newSecretEnv(t)
	const value = "sk-rule-value-51ac"
	status, _, data := e.do("POST", "/secrets", `{"name":"openai","value":"`+value+`"}`)
	if status != http.StatusCreated {
		t.Fatalf("create secret: %d %s", status, data)
	}
	id := secretAnswer(t, data).SecretID
	rules := func(v string) string {
		return `{"rules":{"api.example.com":[{"transform":{"headers":{"Authorization":"` + v + `"}}}]}}`
	}
	sb := e.create(`{"templateID":"base","network":` + rules("Bearer ${e2b.secrets.openai}") + `}`)
	if got := e.backend.network(sb.SandboxID).Rules["api.example.com"][0].Transform.Headers["Authorization"]; got != "Bearer "+netpolicy.SecretRef(id) {
		t.Errorf("the backend got %q", got)
	}
	var seen []string
	for _, path := range []string{"/sandboxes/" + sb.SandboxID, "/v2/sandboxes", "/sandboxes"} {
		status, _, data := e.do("GET", path, "")
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, data)
		}
		seen = append(seen, string(data))
	}
	if !strings.Contains(seen[0], netpolicy.Redacted) {
		t.Errorf("getInfo's network: %s, want the header %s", seen[0], netpolicy.Redacted)
	}
	for _, s := range seen {
		if strings.Contains(s, value) {
			t.Errorf("an answer holds the value: %s", s)
		}
	}

	status, _, data = e.do("POST", "/v2/sandboxes", `{"templateID":"base","network":`+rules("${e2b.secrets.nosuch}")+`}`)
	if status != http.StatusBadRequest || !strings.Contains(string(data), `\"nosuch\"`) {
		t.Errorf("create with an unknown secret: %d %s, want 400 naming it", status, data)
	}
	status, _, data = e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", rules("${e2b.secrets.nosuch}"))
	if status != http.StatusBadRequest || !strings.Contains(string(data), `\"nosuch\"`) {
		t.Errorf("update with an unknown secret: %d %s, want 400 naming it", status, data)
	}
	if status, _, data := e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", rules("${e2b.secrets.openai}")); status != http.StatusNoContent && status != http.StatusOK {
		t.Errorf("update with a known secret: %d %s", status, data)
	}
	if got := e.backend.network(sb.SandboxID).Rules["api.example.com"][0].Transform.Headers["Authorization"]; got != netpolicy.SecretRef(id) {
		t.Errorf("after update the backend has %q", got)
	}
	if strings.Contains(e.log.String(), value) {
		t.Errorf("the log holds the value:\n%s", e.log.String())
	}
}
