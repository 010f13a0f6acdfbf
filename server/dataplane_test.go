package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const startEchoHi = `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]}}`

func TestDataPlaneUnary(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{}`)
	resp := e.data(sb, "POST", "/process.Process/List", "application/json", []byte(`{}`), nil)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("List: %d %s", resp.StatusCode, body)
	}
	var got struct {
		Processes []struct {
			Pid    int `json:"pid"`
			Config struct {
				Cmd string `json:"cmd"`
			} `json:"config"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || len(got.Processes) != 1 || got.Processes[0].Pid != 42 {
		t.Errorf("List answered %s (%v)", body, err)
	}
	// The agent saw the access token and none of the routing headers.
	_, headers := e.agent(sb.SandboxID).seen()
	h := headers[len(headers)-1]
	if h.Get("X-Access-Token") != sb.EnvdAccessToken {
		t.Errorf("the agent got X-Access-Token %q", h.Get("X-Access-Token"))
	}
	for _, k := range []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port", "X-Api-Key"} {
		if v, ok := h[k]; ok {
			t.Errorf("the agent got %s: %q", k, v)
		}
	}
}

func TestDataPlaneServerStream(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{}`)
	hdr := http.Header{"Keepalive-Ping-Interval": {"50"}, "Connect-Timeout-Ms": {"60000"}, "X-Api-Key": {e.key}}
	resp := e.data(sb, "POST", "/process.Process/Start", "application/connect+json", envelope(0, []byte(startEchoHi)), hdr)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("Start: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), readAll(t, resp))
	}
	var events []string
	for {
		flags, msg, err := readEnvelope(resp.Body)
		if err != nil {
			t.Fatalf("read envelope after %v: %v", events, err)
		}
		if flags&0x02 != 0 {
			if strings.TrimSpace(string(msg)) != "{}" {
				t.Errorf("end of stream %s, want {}", msg)
			}
			break
		}
		events = append(events, string(msg))
	}
	want := []string{
		`{"event":{"start":{"pid":42}}}`,
		`{"event":{"data":{"stdout":"aGkK"}}}`, // "hi\n"
		`{"event":{"end":{"exited":true,"status":"exit status 0"}}}`,
	}
	// protojson varies its whitespace on purpose: compare values.
	if !cmp.Equal(jsonValues(t, events), jsonValues(t, want)) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(events, "\n"), strings.Join(want, "\n"))
	}
	_, headers := e.agent(sb.SandboxID).seen()
	h := headers[len(headers)-1]
	if h.Get("Keepalive-Ping-Interval") != "50" || h.Get("Connect-Timeout-Ms") != "60000" || h.Get("X-Api-Key") != "" {
		t.Errorf("the agent got headers %v", h)
	}
}

// TestStreamIsFlushed checks that each event reaches the client as the
// agent sends it: the start event must arrive while the command still
// runs.
func TestStreamIsFlushed(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{}`)
	resp := e.data(sb, "POST", "/process.Process/Start", "application/connect+json",
		envelope(0, []byte(`{"process":{"cmd":"slow"}}`)), nil)
	got := make(chan string, 1)
	go func() {
		_, msg, err := readEnvelope(resp.Body)
		if err != nil {
			msg = []byte(err.Error())
		}
		got <- string(msg)
	}()
	select {
	case msg := <-got:
		if !cmp.Equal(jsonValues(t, []string{msg}), jsonValues(t, []string{`{"event":{"start":{"pid":42}}}`})) {
			t.Errorf("first event %s", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the start event did not arrive while the command ran: the proxy buffers")
	}
	close(e.agent(sb.SandboxID).release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(rest), "ZG9uZQo=") { // "done\n"
		t.Errorf("rest of the stream %q, %v", rest, err)
	}
}

func TestSignedFiles(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{}`)
	other := e.create(`{}`)
	content := strings.Repeat("tupper ", 1000)

	// Upload through a signed URL, with no headers at all.
	up := e.signedURL(sb, "write", "/home/user/a.txt", "user", 0)
	resp, err := http.Post(up, "application/octet-stream", strings.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"path":"/home/user/a.txt"`) {
		t.Fatalf("signed upload: %d %s", resp.StatusCode, body)
	}
	if _, ok := e.agent(other.SandboxID).file("/home/user/a.txt"); ok {
		t.Error("the upload landed in the other sandbox")
	}

	// Download, with and without an expiration.
	future := time.Now().Add(time.Hour).Unix()
	for _, exp := range []int64{0, future} {
		resp, err := http.Get(e.signedURL(sb, "read", "/home/user/a.txt", "user", exp))
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, resp)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || got != content {
			t.Errorf("signed download (expiration %d): %d, %d bytes", exp, resp.StatusCode, len(got))
		}
	}

	// Refusals.
	past := time.Now().Add(-time.Minute).Unix()
	tests := []struct {
		name   string
		method string
		url    string
		want   int
		msg    string
	}{
		{name: "expired", method: "GET", url: e.signedURL(sb, "read", "/home/user/a.txt", "user", past), want: 401, msg: "expired"},
		{name: "read signature used to write", method: "POST", url: e.signedURL(sb, "read", "/home/user/a.txt", "user", 0), want: 401, msg: "matches no running sandbox"},
		{name: "other path", method: "GET", url: strings.Replace(e.signedURL(sb, "read", "/home/user/a.txt", "user", 0), "a.txt", "b.txt", 1), want: 401, msg: "matches no running sandbox"},
		{name: "other user", method: "GET", url: strings.Replace(e.signedURL(sb, "read", "/home/user/a.txt", "user", 0), "username=user", "username=root", 1), want: 401, msg: "matches no running sandbox"},
		{name: "not v1", method: "GET", url: e.http.URL + "/files?path=/x&signature=v2_abc", want: 401, msg: "not a v1"},
		{name: "bad expiration", method: "GET", url: e.http.URL + "/files?path=/x&signature=v1_abc&signature_expiration=soon", want: 401, msg: "not a Unix time"},
		{name: "method", method: "DELETE", url: e.http.URL + "/files?path=/x&signature=v1_abc", want: 400, msg: "not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, tt.url, strings.NewReader("x"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body := readAll(t, resp)
			if resp.StatusCode != tt.want || !strings.Contains(body, tt.msg) {
				t.Errorf("%d %s; want %d mentioning %q", resp.StatusCode, body, tt.want, tt.msg)
			}
		})
	}

	// A sandbox the server did not create itself is found too (the index
	// refreshes from the engine), and a killed one is not.
	e.server.signed.remove(sb.SandboxID)
	time.Sleep(300 * time.Millisecond) // past the index's refresh throttle
	resp, err = http.Get(e.signedURL(sb, "read", "/home/user/a.txt", "user", 0))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("signed download after the index forgot the sandbox: %d", resp.StatusCode)
	}
	if status, _, _ := e.do("DELETE", "/sandboxes/"+sb.SandboxID, ""); status != http.StatusNoContent {
		t.Fatal("kill failed")
	}
	resp, err = http.Get(e.signedURL(sb, "read", "/home/user/a.txt", "user", 0))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("signed download from a killed sandbox: %d, want 401", resp.StatusCode)
	}

	// Signed URLs also work with the routing headers (the Go SDK sends them).
	resp = e.data(other, "POST", "/files?"+strings.SplitN(e.signedURL(other, "write", "/tmp/o", "", 0), "?", 2)[1],
		"application/octet-stream", []byte("o"), http.Header{"X-Access-Token": nil})
	if resp.StatusCode != http.StatusOK {
		t.Errorf("signed upload with routing headers and no token: %d %s", resp.StatusCode, readAll(t, resp))
	}
}

func TestTokenIsolation(t *testing.T) {
	e := newTestEnv(t)
	a := e.create(`{}`)
	b := e.create(`{}`)
	list := []byte(`{}`)
	tests := []struct {
		name  string
		token []string // nil: none
		want  int
	}{
		{name: "own token", token: []string{a.EnvdAccessToken}, want: 200},
		{name: "other sandbox's token", token: []string{b.EnvdAccessToken}, want: 401},
		{name: "API key as token", token: []string{e.key}, want: 401},
		{name: "empty token", token: []string{""}, want: 401},
		{name: "no token", token: nil, want: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := http.Header{"X-Access-Token": tt.token}
			resp := e.data(a, "POST", "/process.Process/List", "application/json", list, hdr)
			body := readAll(t, resp)
			if resp.StatusCode != tt.want {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tt.want)
			}
			if tt.want == 401 && !strings.Contains(body, `"code":"unauthenticated"`) {
				t.Errorf("401 body %s, want a Connect error", body)
			}
		})
	}
	// Refused requests never reached the agent.
	paths, _ := e.agent(a.SandboxID).seen()
	if n := countOf(paths, "/process.Process/List"); n != 1 {
		t.Errorf("the agent served List %d times, want once", n)
	}
	// /health is open, as on the agent; a wrong token still fails.
	if resp := e.data(a, "GET", "/health", "", nil, http.Header{"X-Access-Token": nil}); resp.StatusCode != http.StatusNoContent {
		t.Errorf("/health without a token: %d", resp.StatusCode)
	}
	if resp := e.data(a, "GET", "/health", "", nil, http.Header{"X-Access-Token": {b.EnvdAccessToken}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/health with another sandbox's token: %d", resp.StatusCode)
	}
	// The control plane's API key opens no data plane.
	req, _ := http.NewRequest("GET", e.http.URL+"/envs", nil)
	req.Header.Set("E2b-Sandbox-Id", a.SandboxID)
	req.Header.Set("X-API-KEY", e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/envs with only the API key: %d", resp.StatusCode)
	}
}

func jsonValues(t *testing.T, msgs []string) []any {
	t.Helper()
	var out []any
	for _, m := range msgs {
		var v any
		if err := json.Unmarshal([]byte(m), &v); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		out = append(out, v)
	}
	return out
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func TestOrchestratorPathsRefused(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{}`)
	tests := []struct {
		path string
		want int
	}{
		{path: "/init", want: 403},
		{path: "/freeze", want: 403},
		{path: "/unfreeze", want: 403},
		{path: "/snapshot/prepare", want: 403},
		{path: "/nope", want: 404},
		{path: "/process.Process/../init", want: 400},
		{path: "/files/../init", want: 400},
		{path: "//init", want: 400},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			// A raw request, so that the path reaches the server as written.
			status, body := rawRequest(t, e.http.URL, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: %s\r\n"+
				"E2b-Sandbox-Port: 49983\r\nX-Access-Token: %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
				tt.path, sb.SandboxID, sb.EnvdAccessToken))
			if status != tt.want || strings.Contains(body, "orchestrator endpoint reached") {
				t.Errorf("%d %s, want %d", status, body, tt.want)
			}
		})
	}
	// Through getHost to the agent's port too.
	status, body := rawRequest(t, e.http.URL, fmt.Sprintf("POST /init HTTP/1.1\r\nHost: 49983-%s.tupper.test\r\n"+
		"X-Access-Token: %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", sb.SandboxID, sb.EnvdAccessToken))
	if status != 403 {
		t.Errorf("/init through the Host header: %d %s", status, body)
	}
	paths, _ := e.agent(sb.SandboxID).seen()
	for _, p := range paths {
		if p != "/health" {
			t.Errorf("the agent was asked for %s", p)
		}
	}
}

// rawRequest writes req to the server at base and returns the status and
// body of the answer.
func rawRequest(t *testing.T, base, req string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, readAll(t, resp)
}

func TestUnknownOrDeadSandbox(t *testing.T) {
	e := newTestEnv(t)
	gone := sandboxJSON{SandboxID: "nosuchsandbox0000000", EnvdAccessToken: "x"}
	tests := []struct {
		name, method, path, ctype, msg string
	}{
		{name: "health", method: "GET", path: "/health", msg: `"code":502`},
		{name: "rpc", method: "POST", path: "/process.Process/List", ctype: "application/json", msg: `"code":"unavailable"`},
		{name: "files", method: "GET", path: "/files?path=/x", msg: `"code":502`},
	}
	for _, tt := range tests {
		t.Run("unknown "+tt.name, func(t *testing.T) {
			resp := e.data(gone, tt.method, tt.path, tt.ctype, []byte("{}"), nil)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, tt.msg) || !strings.Contains(body, "not running") {
				t.Errorf("%d %s; want 502 with %s", resp.StatusCode, body, tt.msg)
			}
		})
	}
	// A sandbox whose agent died answers 502, clearly.
	sb := e.create(`{}`)
	e.backend.crash(sb.SandboxID)
	resp := e.data(sb, "POST", "/process.Process/List", "application/json", []byte("{}"), nil)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "not running") || !strings.Contains(body, `"code":"unavailable"`) {
		t.Errorf("dead agent: %d %s", resp.StatusCode, body)
	}
	// A killed one too.
	sb2 := e.create(`{}`)
	e.do("DELETE", "/sandboxes/"+sb2.SandboxID, "")
	if resp := e.data(sb2, "GET", "/health", "", nil, nil); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("/health of a killed sandbox: %d", resp.StatusCode)
	}
	// A bad port header is the client's mistake.
	resp = e.data(sb2, "GET", "/", "", nil, http.Header{"E2b-Sandbox-Port": {"http"}})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("E2b-Sandbox-Port: http gave %d", resp.StatusCode)
	}
}

// TestAddressReuse checks that a new sandbox that gets a dead one's address
// is never served over a connection kept alive to the dead one.
func TestAddressReuse(t *testing.T) {
	e := newTestEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.backend.reuseAddr = ln.Addr().String()
	ln.Close()
	for i := range 3 {
		sb := e.create(`{}`)
		for j := range 2 {
			resp := e.data(sb, "POST", "/process.Process/List", "application/json", []byte(`{}`), nil)
			if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
				t.Fatalf("sandbox %d, request %d: %d %s", i, j, resp.StatusCode, body)
			}
		}
		if status, _, _ := e.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics", ""); status != http.StatusOK {
			t.Fatalf("sandbox %d: metrics %d", i, status)
		}
		if status, _, _ := e.do("DELETE", "/sandboxes/"+sb.SandboxID, ""); status != http.StatusNoContent {
			t.Fatalf("kill %d: %d", i, status)
		}
	}
}
