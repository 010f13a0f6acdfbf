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
)

// startApp serves, on a loopback port, what a user's server inside a
// sandbox would: it echoes the request's Host and headers, and upgrades
// /ws to an echo connection. The fake backend's sandboxes all live on
// 127.0.0.1, so the app is reachable as any sandbox's port.
func startApp(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			if r.Header.Get("Upgrade") != "websocket" {
				http.Error(w, "want an upgrade", http.StatusBadRequest)
				return
			}
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			rw.Flush()
			line, _ := rw.ReadString('\n')
			rw.WriteString("echo: " + line)
			rw.Flush()
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"host": r.Host, "path": r.URL.RequestURI(), "header": r.Header})
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

type appEcho struct {
	Host   string      `json:"host"`
	Path   string      `json:"path"`
	Header http.Header `json:"header"`
}

func TestHostRouting(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{}`)
	port := startApp(t)
	srvPort := e.http.Listener.Addr().(*net.TCPAddr).Port
	host := fmt.Sprintf("%d-%s.tupper.test:%d", port, sb.SandboxID, srvPort)

	req, _ := http.NewRequest("GET", e.http.URL+"/some/page?q=1", nil)
	req.Host = host
	req.Header.Set("X-API-KEY", e.key)
	req.Header.Set("E2b-Traffic-Access-Token", "t")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got appEcho
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("through getHost: %d, %v", resp.StatusCode, err)
	}
	if got.Host != host || got.Path != "/some/page?q=1" {
		t.Errorf("the app saw host %q path %q, want %q /some/page?q=1", got.Host, got.Path, host)
	}
	for _, k := range []string{"X-Api-Key", "E2b-Traffic-Access-Token"} {
		if _, ok := got.Header[k]; ok {
			t.Errorf("the app got %s", k)
		}
	}
	if got.Header.Get("X-Forwarded-Host") != host {
		t.Errorf("X-Forwarded-Host %q", got.Header.Get("X-Forwarded-Host"))
	}

	// A WebSocket upgrade passes through and the connection stays open.
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", host)
	br := bufio.NewReader(conn)
	wsResp, err := http.ReadResponse(br, nil)
	if err != nil || wsResp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", wsResp, err)
	}
	io.WriteString(conn, "ping\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo: ping\n" {
		t.Errorf("over the upgraded connection: %q, %v", line, err)
	}

	// The E2b-Sandbox-Port header reaches the same port, as the code
	// interpreter SDK does for 49999, without an access token.
	r2 := e.data(sb, "GET", "/ctx", "", nil, http.Header{"E2b-Sandbox-Port": {fmt.Sprint(port)}, "X-Access-Token": nil})
	if r2.StatusCode != http.StatusOK {
		t.Errorf("E2b-Sandbox-Port %d: %d %s", port, r2.StatusCode, readAll(t, r2))
	}

	// Unknown sandboxes are 502; a Host that only looks similar is the
	// control plane's.
	for _, tt := range []struct {
		host string
		want int
	}{
		{host: fmt.Sprintf("%d-nosuchsandbox.tupper.test", port), want: 502},
		{host: "localhost:3000", want: 401},
		{host: fmt.Sprintf("0%d-%s.tupper.test", port, sb.SandboxID), want: 401},
		{host: fmt.Sprintf("%d-%s", port, sb.SandboxID), want: 401},
	} {
		status, body := rawRequest(t, e.http.URL, "GET / HTTP/1.1\r\nHost: "+tt.host+"\r\nConnection: close\r\n\r\n")
		if status != tt.want {
			t.Errorf("Host %s: %d %s, want %d", tt.host, status, body, tt.want)
		}
	}
}

func TestPrivateTraffic(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{"network":{"allowPublicTraffic":false}}`)
	if sb.TrafficAccessToken == nil || *sb.TrafficAccessToken == "" || *sb.TrafficAccessToken == sb.EnvdAccessToken {
		t.Fatalf("create answered trafficAccessToken %v", sb.TrafficAccessToken)
	}
	public := e.create(`{}`)
	port := startApp(t)
	get := func(id string, hdr map[string]string) int {
		req, _ := http.NewRequest("GET", e.http.URL+"/", nil)
		req.Host = fmt.Sprintf("%d-%s.tupper.test", port, id)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	tests := []struct {
		name string
		id   string
		hdr  map[string]string
		want int
	}{
		{name: "no token", id: sb.SandboxID, want: 401},
		{name: "traffic token", id: sb.SandboxID, hdr: map[string]string{"E2B-Traffic-Access-Token": *sb.TrafficAccessToken}, want: 200},
		{name: "envd token", id: sb.SandboxID, hdr: map[string]string{"X-Access-Token": sb.EnvdAccessToken}, want: 200},
		{name: "other sandbox's token", id: sb.SandboxID, hdr: map[string]string{"X-Access-Token": public.EnvdAccessToken}, want: 401},
		{name: "public sandbox", id: public.SandboxID, want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := get(tt.id, tt.hdr); got != tt.want {
				t.Errorf("%d, want %d", got, tt.want)
			}
		})
	}
	// The envd token opens the agent as root: a sandbox's own server must
	// never receive it.
	req, _ := http.NewRequest("GET", e.http.URL+"/", nil)
	req.Host = fmt.Sprintf("%d-%s.tupper.test", port, sb.SandboxID)
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var seen struct {
		Path   string
		Header http.Header
	}
	json.NewDecoder(resp.Body).Decode(&seen)
	resp.Body.Close()
	if resp.StatusCode != 200 || seen.Header == nil {
		t.Fatalf("app answered %d %+v", resp.StatusCode, seen)
	}
	if got := seen.Header.Get("X-Access-Token"); got != "" {
		t.Errorf("the sandbox's own server received the envd access token %q", got)
	}
	// Nor any API key, whatever header carries it; other credentials pass.
	req, _ = http.NewRequest("GET", e.http.URL+"/?token="+e.key+"&page=2", nil)
	req.Host = fmt.Sprintf("%d-%s.tupper.test", port, sb.SandboxID)
	req.Header.Set("E2B-Traffic-Access-Token", *sb.TrafficAccessToken)
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("X-Forwarded-Key", "token="+e.key+"; x=1")
	req.Header.Set("Referer", "http://app.test/?k%3d"+e.key)
	req.Header.Set("X-Joined", "x_"+e.key)
	req.Header.Add("X-App-Token", "app-secret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	seen.Header, seen.Path = nil, ""
	json.NewDecoder(resp.Body).Decode(&seen)
	resp.Body.Close()
	if resp.StatusCode != 200 || seen.Header == nil {
		t.Fatalf("app answered %d %+v", resp.StatusCode, seen)
	}
	for name, vals := range seen.Header {
		for _, v := range vals {
			if strings.Contains(v, e.key) {
				t.Errorf("the sandbox's own server received the API key in %s: %q", name, v)
			}
		}
	}
	if got := seen.Header.Get("X-App-Token"); got != "app-secret" {
		t.Errorf("a credential of the app's own was dropped: %q", got)
	}
	if strings.Contains(seen.Path, e.key) || !strings.Contains(seen.Path, "page=2") {
		t.Errorf("the app saw the path %q: want the key out of the query and the rest kept", seen.Path)
	}
	_, _, raw := e.do("GET", "/sandboxes/"+sb.SandboxID, "")
	if !strings.Contains(string(raw), `"allowPublicTraffic":false`) {
		t.Errorf("detail %s does not report the policy", raw)
	}
}

// TestCodeInterpreterGetsTheToken: E2B's code-interpreter SDKs send the
// envd token to the interpreter's port, whose server (Tupper's own) checks
// it; no other port, and no sandbox without the interpreter, receives it.
func TestCodeInterpreterGetsTheToken(t *testing.T) {
	e := newTestEnv(t)
	interp, other := startApp(t), startApp(t)
	sb := e.create(fmt.Sprintf(`{"templateID":"interpreter-at-%d"}`, interp))
	plain := e.create(`{}`)
	tokenSeen := func(sb sandboxJSON, port int) string {
		t.Helper()
		resp := e.data(sb, "POST", "/execute", "application/json", []byte(`{"code":"1"}`),
			http.Header{"E2b-Sandbox-Port": {fmt.Sprint(port)}, "X-Access-Token": {sb.EnvdAccessToken}})
		defer resp.Body.Close()
		var seen appEcho
		if err := json.NewDecoder(resp.Body).Decode(&seen); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("port %d: %d, %v", port, resp.StatusCode, err)
		}
		return seen.Header.Get("X-Access-Token")
	}
	if got := tokenSeen(sb, interp); got != sb.EnvdAccessToken {
		t.Errorf("the interpreter's port got X-Access-Token %q, want the sandbox's", got)
	}
	if got := tokenSeen(sb, other); got != "" {
		t.Errorf("another port of the interpreter's sandbox got the envd token %q", got)
	}
	if got := tokenSeen(plain, interp); got != "" {
		t.Errorf("a sandbox without the interpreter got the envd token %q on the same port", got)
	}
}
