package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestInterpreterAttacks attacks the code interpreter of a real `tupper
// serve` on runsc: from outside (no key, no token, another sandbox's
// token, another team's key), and from inside, as a cell's code (the
// unprivileged user: sudo does not work in a sandbox). One daemon; each
// attack has a sandbox of its own.
func TestInterpreterAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes")
	}
	d := startInterpreterDaemon(t)
	t.Run("outsiders cannot run code", func(t *testing.T) { attackOutsiders(t, d) })
	t.Run("a cell cannot read the token", func(t *testing.T) { attackTokenFromCell(t, d) })
	t.Run("a cell cannot take over the interpreter's port", func(t *testing.T) { attackShadowPort(t, d) })
	t.Run("an outsider cannot exhaust memory through contexts", func(t *testing.T) { attackContextStorm(t, d) })
	t.Run("an output flood leaves other contexts alone", func(t *testing.T) { attackOutputFlood(t, d) })
	t.Run("a fork bomb in a cell leaves the sandbox running", func(t *testing.T) { attackForkBomb(t, d) })
}

// TestInterpreterAttacksOnRunc runs the attacks whose defence differs on
// the runc backend, where a cell's process and the interpreter share the
// host's kernel: reading the token out of the interpreter's memory is
// refused by the kernel's own rules (the processes are undumpable), not
// gVisor's.
func TestInterpreterAttacksOnRunc(t *testing.T) {
	if testing.Short() {
		t.Skip("boots containers")
	}
	requireRunc(t)
	d := startInterpreterDaemon(t, "--backend", "runc")
	t.Run("outsiders cannot run code", func(t *testing.T) { attackOutsiders(t, d) })
	t.Run("a cell cannot read the token", func(t *testing.T) { attackTokenFromCell(t, d) })
	t.Run("a cell cannot take over the interpreter's port", func(t *testing.T) { attackShadowPort(t, d) })
}

// ciBox is a sandbox seen from outside, through the daemon's data plane.
type ciBox struct {
	d       *serveDaemon
	id      string
	token   string // envdAccessToken
	traffic string // trafficAccessToken, when public traffic is off
}

// newBox creates a sandbox with body (the code-interpreter template unless
// body names one) and kills it when the test ends.
func newBox(ctx context.Context, t *testing.T, d *serveDaemon, body map[string]any) *ciBox {
	t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if body["templateID"] == nil {
		body["templateID"] = "code-interpreter-v1"
	}
	status, data, err := d.api(ctx, http.MethodPost, "/sandboxes", body)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("create %v: %d %s %v", body, status, data, err)
	}
	var sb struct {
		ID      string  `json:"sandboxID"`
		Token   string  `json:"envdAccessToken"`
		Traffic *string `json:"trafficAccessToken"`
	}
	if err := json.Unmarshal(data, &sb); err != nil {
		t.Fatal(err)
	}
	b := &ciBox{d: d, id: sb.ID, token: sb.Token}
	if sb.Traffic != nil {
		b.traffic = *sb.Traffic
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d.api(ctx, http.MethodDelete, "/sandboxes/"+b.id, nil)
	})
	return b
}

// send sends one request to port of the sandbox, routed by header as the
// SDKs do, with hdr added.
func (b *ciBox) send(ctx context.Context, port int, method, path, body string, hdr map[string]string) (*http.Response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.d.URL+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("E2b-Sandbox-Id", b.id)
	req.Header.Set("E2b-Sandbox-Port", fmt.Sprint(port))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

// call sends one request to the interpreter and reads the whole answer.
func (b *ciBox) call(ctx context.Context, t *testing.T, method, path, body string, hdr map[string]string) (int, string) {
	t.Helper()
	resp, err := b.send(ctx, 49999, method, path, body, hdr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// ciCell is what one /execute answered, line by line.
type ciCell []map[string]any

func (c ciCell) stream(name string) string {
	var s strings.Builder
	for _, l := range c {
		if l["type"] == name {
			v, _ := l["text"].(string)
			s.WriteString(v)
		}
	}
	return s.String()
}

func (c ciCell) main() string {
	for _, l := range c {
		if l["type"] == "result" && l["is_main_result"] == true {
			v, _ := l["text"].(string)
			return v
		}
	}
	return ""
}

func (c ciCell) err() string {
	for _, l := range c {
		if l["type"] == "error" {
			return fmt.Sprintf("%v: %v", l["name"], l["value"])
		}
	}
	return ""
}

// run runs a cell with the sandbox's token, as the SDKs do. A status
// other than 200 fails the test; a broken stream is returned as an error.
func (b *ciBox) run(ctx context.Context, t *testing.T, req map[string]any) (ciCell, error) {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := b.send(ctx, 49999, http.MethodPost, "/execute", string(body), map[string]string{"X-Access-Token": b.token})
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("execute %.80q: %s %s", req["code"], resp.Status, data)
	}
	var c ciCell
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 128<<20)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return c, fmt.Errorf("line %.80q: %v", sc.Text(), err)
		}
		c = append(c, l)
	}
	if err := sc.Err(); err != nil {
		return c, err
	}
	if len(c) == 0 || c[len(c)-1]["type"] != "end_of_execution" {
		return c, fmt.Errorf("the answer ended without end_of_execution")
	}
	return c, nil
}

// mustRun is run that fails the test on a broken stream.
func (b *ciBox) mustRun(ctx context.Context, t *testing.T, req map[string]any) ciCell {
	t.Helper()
	c, err := b.run(ctx, t, req)
	if err != nil {
		t.Fatalf("execute %.80q: %v", req["code"], err)
	}
	return c
}

// newContext makes a context through the data plane, with no credentials
// (as the SDKs do when the sandbox's traffic is public), and returns its id.
func (b *ciBox) newContext(ctx context.Context, t *testing.T, lang string) string {
	t.Helper()
	status, body := b.call(ctx, t, http.MethodPost, "/contexts", fmt.Sprintf(`{"language":%q}`, lang), nil)
	var c struct{ ID string }
	if err := json.Unmarshal([]byte(body), &c); status != http.StatusOK || err != nil || c.ID == "" {
		t.Fatalf("create a %s context: %d %s", lang, status, body)
	}
	return c.ID
}

// attackOutsiders: /execute takes only the sandbox's own envd token, and
// another team's key beside it does not help; with public traffic off the
// context routes want the traffic token too; and a server of a sandbox
// that is not the interpreter, on the interpreter's port, never sees the
// envd token.
func attackOutsiders(t *testing.T, d *serveDaemon) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	box := newBox(ctx, t, d, nil)
	other := newBox(ctx, t, d, nil)
	blue := d.addKey(t, "--team", "blue", "--name", "blue-interp")
	const cell = `{"code":"open('/tmp/pwned', 'w').write('x')"}`
	for _, tc := range []struct {
		name string
		hdr  map[string]string
	}{
		{"no token", nil},
		{"an empty token", map[string]string{"X-Access-Token": ""}},
		{"another sandbox's token", map[string]string{"X-Access-Token": other.token}},
		{"its traffic token", map[string]string{"X-Access-Token": "", "E2b-Traffic-Access-Token": "x"}},
		{"its token, with another team's key", map[string]string{"X-Access-Token": box.token, "X-API-KEY": blue}},
	} {
		if status, body := box.call(ctx, t, http.MethodPost, "/execute", cell, tc.hdr); status == http.StatusOK {
			t.Errorf("/execute with %s: %d %s, want it refused", tc.name, status, body)
		}
	}
	if c := box.mustRun(ctx, t, map[string]any{"code": "import os\nos.path.exists('/tmp/pwned')"}); c.main() != "False" {
		t.Errorf("a refused /execute ran its cell: %v", c)
	}

	private := newBox(ctx, t, d, map[string]any{"network": map[string]any{"allowPublicTraffic": false}})
	if private.traffic == "" {
		t.Fatal("a sandbox without public traffic came without a trafficAccessToken")
	}
	for _, route := range []struct{ method, path, body string }{
		{http.MethodGet, "/contexts", ""},
		{http.MethodPost, "/contexts", `{"language":"python"}`},
		{http.MethodPost, "/execute", `{"code":"1"}`},
	} {
		if status, body := private.call(ctx, t, route.method, route.path, route.body, nil); status != http.StatusUnauthorized {
			t.Errorf("public traffic off: %s %s without a token: %d %s, want 401", route.method, route.path, status, body)
		}
	}
	if status, body := private.call(ctx, t, http.MethodGet, "/contexts", "", map[string]string{"E2b-Traffic-Access-Token": private.traffic}); status != http.StatusOK {
		t.Errorf("public traffic off: GET /contexts with the traffic token: %d %s", status, body)
	}
	if status, body := private.call(ctx, t, http.MethodPost, "/execute", `{"code":"1"}`, map[string]string{"E2b-Traffic-Access-Token": private.traffic}); status != http.StatusUnauthorized {
		t.Errorf("public traffic off: /execute with the traffic token alone: %d %s, want 401", status, body)
	}

	// A base sandbox runs a server of its own on 49999: the SDK's headers
	// reach it without the envd token.
	base := newBox(ctx, t, d, map[string]any{"templateID": "base"})
	sb, err := goClient(t, d).Connect(ctx, base.id)
	if err != nil {
		t.Fatal(err)
	}
	const echo = `import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = str(self.headers).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(('', 49999), H).serve_forever()
`
	if _, err := sb.Files.Write(ctx, "/tmp/echo.py", []byte(echo)); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Commands.Start(ctx, "python3 /tmp/echo.py"); err != nil {
		t.Fatal(err)
	}
	var headers string
	waitUntil(t, 30*time.Second, "the base sandbox's server on 49999", func() bool {
		status, body := base.call(ctx, t, http.MethodPost, "/execute", `{"code":"1"}`, map[string]string{"X-Access-Token": base.token})
		headers = body
		return status == http.StatusOK
	})
	if strings.Contains(headers, base.token) || strings.Contains(strings.ToLower(headers), "x-access-token") {
		t.Errorf("a base sandbox's own server on port 49999 received the envd token:\n%s", headers)
	}
}

// attackTokenFromCell: the envd token opens the agent, which runs
// commands as root; a cell runs as the unprivileged user and must not find
// it in any process's environment or command line, nor read it from the
// interpreter's or the agent's memory.
func attackTokenFromCell(t *testing.T, d *serveDaemon) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	box := newBox(ctx, t, d, nil)
	// The cell prints all it can read; the test looks for the token.
	const probe = `import os
for p in sorted(os.listdir('/proc'), key=lambda p: (not p.isdigit(), p)):
    for f in ('environ', 'cmdline'):
        try:
            print(p, f, open('/proc/%s/%s' % (p, f), 'rb').read().replace(b'\0', b' ').decode(errors='replace'))
        except Exception as e:
            pass
    try:
        cl = open('/proc/%s/cmdline' % p, 'rb').read()
    except Exception:
        continue
    if b'tupper-agent' in cl:
        # Offset 0 is never mapped: read at the start of a mapping the
        # process's maps names, which succeeds when its memory is open.
        try:
            start = int(open('/proc/%s/maps' % p).readline().split('-')[0], 16)
            with open('/proc/%s/mem' % p, 'rb') as m:
                m.seek(start)
                m.read(1)
            print('READABLE MEMORY', p)
        except Exception:
            pass
`
	c := box.mustRun(ctx, t, map[string]any{"code": probe})
	out := c.stream("stdout")
	if !strings.Contains(out, "tupper-agent") {
		t.Fatalf("the probe saw no agent process; stdout %.500q, error %s", out, c.err())
	}
	if strings.Contains(out, box.token) {
		t.Errorf("a cell found the envd token in a process's environment or command line")
	}
	if strings.Contains(out, "READABLE MEMORY") {
		t.Errorf("a cell can read the agent's or the interpreter's memory:\n%s", out)
	}
}

// attackShadowPort: a cell binds the sandbox's own address on the
// interpreter's port (and then the agent's). gVisor lets a listener on a
// specific address shadow the wildcard one the agent holds when both set
// SO_REUSEADDR, which Go's listeners do; the daemon dials the sandbox's
// address, so new connections would reach the cell's server, with the
// envd token in their headers: the unprivileged user gets root through
// the agent, and can answer in the interpreter's place.
func attackShadowPort(t *testing.T, d *serveDaemon) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	box := newBox(ctx, t, d, nil)
	const impostor = `import socket, sys
ip = sys.argv[1]
# The agent's port: bound and let go at once, only to learn whether it can be.
a = socket.socket()
a.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    a.bind((ip, 49983)); a.listen(1); agent = 'bound'
except OSError as e:
    agent = 'refused'
a.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind((ip, 49999)); s.listen(16); interp = 'bound'
except OSError as e:
    interp = 'refused'
open('/tmp/impostor.state', 'w').write('agent=%s interpreter=%s' % (agent, interp))
if interp != 'bound':
    sys.exit()
body = b'{"type":"result","is_main_result":true,"text":"forged"}\n{"type":"end_of_execution"}\n'
while True:
    c, _ = s.accept()
    open('/tmp/impostor.log', 'ab').write(c.recv(65536))
    c.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\nContent-Length: %d\r\n\r\n' % len(body) + body)
    c.close()
`
	launch := fmt.Sprintf(`import subprocess, sys, time
open('/tmp/impostor.py', 'w').write(%s)
ip = subprocess.run(['hostname', '-I'], capture_output=True, text=True).stdout.split()[0]
subprocess.Popen([sys.executable, '/tmp/impostor.py', ip], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(100):
    try:
        print(open('/tmp/impostor.state').read()); break
    except OSError:
        time.sleep(0.05)
`, jsonString(impostor))
	c := box.mustRun(ctx, t, map[string]any{"code": launch})
	state := strings.TrimSpace(c.stream("stdout"))
	if !strings.HasPrefix(state, "agent=") {
		t.Fatalf("the impostor did not start: %q %s %s", state, c.stream("stderr"), c.err())
	}
	if strings.Contains(state, "agent=bound") {
		t.Errorf("a cell could listen on the sandbox's address on the agent's port 49983, over the agent's own listener: every new data-plane connection to the agent would reach it, envd token included")
	}

	// Clients as the SDKs: several at once, so that the daemon dials new
	// connections rather than reusing the one it has.
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		forged int
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, body := box.call(ctx, t, http.MethodPost, "/execute", `{"code":"import time; time.sleep(1); 'real'"}`, map[string]string{"X-Access-Token": box.token})
			if status == http.StatusOK && strings.Contains(body, "forged") {
				mu.Lock()
				forged++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sb, err := goClient(t, d).Connect(ctx, box.id)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := sb.Commands.Run(ctx, "cat /tmp/impostor.log 2>/dev/null; true")
	if strings.Contains(state, "interpreter=bound") || forged > 0 || strings.Contains(r.Stdout, box.token) {
		t.Errorf("a cell took over the interpreter's port (%s): %d of 4 /execute calls were answered by it, and it received the envd token: %v",
			state, forged, strings.Contains(r.Stdout, box.token))
	}
}

// attackContextStorm: someone who knows only the sandbox's id (no key, no
// token: E2B's SDKs send none to /contexts) makes a context of their own
// and restarts it many times, dropping each request at once. The user's
// context, holding 300 MB of data, must keep it.
func attackContextStorm(t *testing.T, d *serveDaemon) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	box := newBox(ctx, t, d, nil)
	const data = "big = bytearray(300 << 20)\nfor i in range(0, len(big), 4096): big[i] = 1\nlen(big)"
	if c := box.mustRun(ctx, t, map[string]any{"code": data}); c.main() != "314572800" {
		t.Fatalf("the user's data: %v", c)
	}

	theirs := box.newContext(ctx, t, "python")
	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer rcancel()
			if resp, err := box.send(rctx, 49999, http.MethodPost, "/contexts/"+theirs+"/restart", "", nil); err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	time.Sleep(10 * time.Second) // the restarts' kernels start, or fail to

	c, err := box.run(ctx, t, map[string]any{"code": "len(big)"})
	if err != nil || c.main() != "314572800" {
		t.Errorf("after 30 abandoned restarts of another context by someone without a key or token, the user's context lost its data: %v %v (each restart starts a Python kernel, about 140 MB, and the sandbox's out-of-memory killer takes the largest process)", c.err(), err)
	}
}

// attackOutputFlood: a cell writes a 60 MB line to stdout, then another
// writes 200 MB in 1 MB pieces. The output may be cut, and the flooding
// context may lose its kernel, but the sandbox's out-of-memory killer must
// not end the interpreter's server, which would end every context: another
// context keeps its state. (The server's memory grows to about 300 MB
// while it passes the 60 MB line on, and stays there; the next flood makes
// it the largest process left.)
func attackOutputFlood(t *testing.T, d *serveDaemon) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	box := newBox(ctx, t, d, nil)
	other := box.newContext(ctx, t, "python")
	box.mustRun(ctx, t, map[string]any{"code": "kept = 7", "context_id": other})

	for _, code := range []string{
		"import sys\nsys.stdout.write('x' * 60_000_000)\nsys.stdout.flush()\nprint('after')",
		"import sys\nfor i in range(200):\n    sys.stdout.write('y' * 1_000_000)\nprint('after')",
	} {
		if c, err := box.run(ctx, t, map[string]any{"code": code}); err != nil {
			t.Errorf("%.60q: the answer broke off without an error line: %v (after %d bytes of stdout)", code, err, len(c.stream("stdout")))
		}
	}
	status, body := box.call(ctx, t, http.MethodPost, "/execute", fmt.Sprintf(`{"code":"kept","context_id":%q}`, other), map[string]string{"X-Access-Token": box.token})
	if status != http.StatusOK || !strings.Contains(body, `"text":"7"`) {
		t.Errorf("after a 60 MB line and 200 MB of stdout from cells of one context, another context lost its state: %d %.300s (the out-of-memory killer ended the interpreter's server, and with it every context)", status, body)
	}
}

// attackForkBomb: a Python cell forks without end. Its client gives up;
// the bomb may take its own context down, but the sandbox (its other
// contexts, its files) must stay: SECURITY.md says a fork bomb or a memory
// bomb ends only its own processes. Each child is a copy of a Jupyter
// kernel, and they fill the sandbox's memory faster than the agent's
// out-of-memory killer, taking one of them at a time, frees it; the
// host's cgroup backstop then kills the whole sandbox.
func attackForkBomb(t *testing.T, d *serveDaemon) {
	// A known gap, not a pass: the host's memory cgroup ends the sandbox
	// about half a second into a Python fork bomb, while gVisor's own
	// meminfo, which the agent's killer reads, still shows 90% of the
	// memory free (its usage figures lag). README "Not done yet" and
	// SECURITY.md say so; TUPPER_KNOWN_GAPS=1 runs the attack.
	if os.Getenv("TUPPER_KNOWN_GAPS") == "" {
		t.Skip("known gap: a Python fork bomb outruns the agent's out-of-memory killer and the host cgroup ends the sandbox (README, Not done yet); set TUPPER_KNOWN_GAPS=1 to run it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	box := newBox(ctx, t, d, nil)
	other := box.newContext(ctx, t, "python")
	box.mustRun(ctx, t, map[string]any{"code": "kept = 7", "context_id": other})

	bctx, bcancel := context.WithTimeout(ctx, 8*time.Second)
	box.run(bctx, t, map[string]any{"code": "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"})
	bcancel()
	time.Sleep(3 * time.Second)

	status, _, err := d.api(ctx, http.MethodGet, "/sandboxes/"+box.id, nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("after a fork bomb in a cell, the sandbox is gone: GET /sandboxes/%s: %d %v (the host's memory cgroup killed it: the agent's out-of-memory killer did not keep up)", box.id, status, err)
	}
	status, body := box.call(ctx, t, http.MethodPost, "/execute", fmt.Sprintf(`{"code":"kept","context_id":%q}`, other), map[string]string{"X-Access-Token": box.token})
	if status != http.StatusOK || !strings.Contains(body, `"text":"7"`) {
		t.Errorf("after a fork bomb in one context, another lost its state: %d %.300s", status, body)
	}
}

// jsonString quotes s as a JSON string, which Python also reads.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
