package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/testutil"
)

// serveDaemon is a `tupper serve` subprocess on loopback, on its own state
// directory, with the Debian test image as its "base" template. It can be
// stopped, crashed (SIGKILL) and started again on the same root and port, as
// a real daemon is. Its log goes to a file (a pipe would be inherited by the
// sandboxes' processes and never close) and is shown when the test fails.
type serveDaemon struct {
	// URL is the daemon's base URL, http://127.0.0.1:PORT: E2B_API_URL and
	// E2B_SANDBOX_URL.
	URL string
	// Key is the API key the first start printed: E2B_API_KEY.
	Key string
	// Root is the daemon's state directory.
	Root string
	// otherKeys are the keys of other teams that tests made (addKey):
	// the cleanup kills their sandboxes too, which Key cannot see.
	otherKeys []string

	tupper string
	// env is more of the daemon's environment, KEY=VALUE.
	env       []string
	addr      string
	imageRoot string
	logPath   string
	// args are more flags of `tupper serve`.
	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
	http   *http.Client
}

// serveKeyLine is how the first start prints the API key.
var serveKeyLine = regexp.MustCompile(`export E2B_API_KEY=(e2b_[0-9a-f]+)`)

// startServeDaemon builds the binaries, registers the Debian test image as
// template "base" and starts `tupper serve` on a free loopback port. It
// skips the test where runsc, root or mmdebstrap are missing. Cleanup kills
// every sandbox the daemon runs, stops it and checks nothing is left on the
// host.
func startServeDaemon(t testing.TB, args ...string) *serveDaemon {
	t.Helper()
	testutil.RequiresRunsc(t)
	// Unix socket paths that runsc makes under the root must stay under
	// 108 bytes: a short directory in /tmp, not t.TempDir().
	root, err := os.MkdirTemp("", "te-")
	if err != nil {
		t.Fatal(err)
	}
	return startServeDaemonIn(t, root, args...)
}

// startServeDaemonIn is startServeDaemon with root as the daemon's state
// directory, which the cleanup empties.
func startServeDaemonIn(t testing.TB, root string, args ...string) *serveDaemon {
	t.Helper()
	testutil.RequiresRunsc(t)
	tupper, _ := e2eBinaries(t)
	storeRoot := baseTemplate(t)
	d := &serveDaemon{
		Root: root, tupper: tupper, addr: freeLoopbackAddr(t), imageRoot: storeRoot,
		logPath: filepath.Join(root, "serve.log"), args: args,
		http: &http.Client{Timeout: 2 * time.Minute},
	}
	d.URL = "http://" + d.addr
	t.Cleanup(func() { d.cleanup(t) })
	d.start(t)
	return d
}

// baseTemplate makes sure the shared store of the Debian test image also
// names it "base", the template the E2B SDKs ask for by default, and
// returns the store's root.
func baseTemplate(t testing.TB) string {
	t.Helper()
	storeRoot, name := testutil.TestImage(t)
	tagTestImage(t, storeRoot, name, "base")
	return storeRoot
}

// startInterpreterDaemon is startServeDaemon with the code-interpreter
// template too (testutil.InterpreterImage, built once per machine), as
// `tupper image build code-interpreter` makes it.
func startInterpreterDaemon(t *testing.T, args ...string) *serveDaemon {
	t.Helper()
	testutil.RequiresRunsc(t)
	storeRoot, name := testutil.InterpreterImage(t)
	tagTestImage(t, storeRoot, name, image.CodeInterpreterTemplate)
	return startServeDaemon(t, args...)
}

// tagTestImage makes sure the shared test store also names image name tag.
func tagTestImage(t testing.TB, storeRoot, name, tag string) {
	t.Helper()
	store, err := image.Open(image.Config{Root: storeRoot})
	if err != nil {
		t.Fatalf("open the test image store: %v", err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want, err := store.Resolve(ctx, name)
	if err != nil {
		t.Fatalf("resolve the test image %s: %v", name, err)
	}
	if got, err := store.Resolve(ctx, tag); err == nil && got.ID == want.ID {
		return
	}
	if err := store.Tag(ctx, name, tag); err != nil {
		t.Fatalf("tag the test image %s as %s: %v", name, tag, err)
	}
}

// freeLoopbackAddr returns 127.0.0.1:PORT for a port free right now. The
// daemon keeps it across restarts, as a real one would.
func freeLoopbackAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start starts the daemon and waits until it serves; the first start
// reads the API key from its output. It fails the test if the daemon does
// not come up.
func (d *serveDaemon) start(t testing.TB) {
	t.Helper()
	if err := d.launch(); err != nil {
		t.Fatal(err)
	}
}

func (d *serveDaemon) launch() error {
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "\n===== tupper serve starting at %s =====\n", time.Now().Format(time.RFC3339Nano))
	logStart, _ := logf.Seek(0, io.SeekEnd)

	cmd := exec.Command(d.tupper, append([]string{"--root", d.Root, "--verbose", "serve",
		"--addr", d.addr, "--image-root", d.imageRoot}, d.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(append(os.Environ(), "TUPPER_ROOT="), d.env...)
	// Its own process group: a ^C to the test must not reach it before
	// the cleanup has killed its sandboxes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start tupper serve: %w", err)
	}
	d.cmd, d.exited = cmd, make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		cmd.Wait()
		close(exited)
	}(cmd, d.exited)

	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-d.exited:
			return fmt.Errorf("tupper serve exited at start (%v); its log:\n%s", cmd.ProcessState, d.logSince(logStart))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tupper serve did not answer within 90s; its log:\n%s", d.logSince(logStart))
		}
		if d.Key == "" {
			if m := serveKeyLine.FindStringSubmatch(d.logSince(0)); m != nil {
				d.Key = m[1]
			}
		}
		if d.Key != "" && strings.Contains(d.logSince(logStart), "listening on "+d.URL) {
			// Any answer will do: the listener is up.
			if resp, err := d.http.Get(d.URL + "/health"); err == nil {
				resp.Body.Close()
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// running reports whether the daemon process is alive.
func (d *serveDaemon) running() bool {
	if d.cmd == nil {
		return false
	}
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// crash kills the daemon with SIGKILL, as an OOM killer or a power cut
// would: no cleanup runs, sandboxes keep running.
func (d *serveDaemon) crash(t *testing.T) {
	t.Helper()
	if !d.running() {
		t.Fatal("crash: tupper serve is not running")
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL tupper serve: %v", err)
	}
	<-d.exited
}

// stop stops the daemon with SIGTERM and waits for it. Sandboxes keep
// running.
func (d *serveDaemon) stop(t testing.TB) {
	t.Helper()
	if !d.running() {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		t.Errorf("tupper serve did not stop within a minute of SIGTERM: killing it")
		d.cmd.Process.Signal(syscall.SIGKILL)
		<-d.exited
	}
}

// log returns everything the daemon wrote, over all its starts.
func (d *serveDaemon) log() string { return d.logSince(0) }

func (d *serveDaemon) logSince(off int64) string {
	b, err := os.ReadFile(d.logPath)
	if err != nil || off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}

// cleanup kills every sandbox through the API, stops the daemon, shows its
// log when the test failed, and fails the test if anything of the
// sandboxes is left on the host.
func (d *serveDaemon) cleanup(t testing.TB) {
	if !d.running() && d.Key != "" {
		// Crashed or stopped by the test: start it once more so that it
		// recovers and kills what is left.
		if err := d.launch(); err != nil {
			t.Errorf("cleanup: restart tupper serve to kill its sandboxes: %v", err)
		}
	}
	if d.running() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		for _, key := range append([]string{d.Key}, d.otherKeys...) {
			k := *d
			k.Key = key
			for _, id := range k.sandboxIDs(ctx, t) {
				status, body, err := k.api(ctx, http.MethodDelete, "/sandboxes/"+id, nil)
				if err != nil || (status != http.StatusNoContent && status != http.StatusNotFound) {
					t.Errorf("cleanup: kill sandbox %s: %d %s %v", id, status, body, err)
				}
			}
		}
		cancel()
		d.stop(t)
	}
	if t.Failed() {
		t.Logf("tupper serve log (%s):\n%s", d.logPath, tailLines(d.log(), 400))
	}
	if left := testutil.Leftovers(t, testutil.Leaks{Root: d.Root}); len(left) > 0 {
		t.Errorf("the daemon's sandboxes left behind:\n%s", strings.Join(left, "\n"))
	} else {
		os.RemoveAll(d.Root)
	}
}

// addKey makes an API key with `tupper keys create` and args (such as
// --team), and returns it; the cleanup kills its sandboxes too.
func (d *serveDaemon) addKey(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(d.tupper, append([]string{"--root", d.Root, "keys", "create"}, args...)...).Output()
	if err != nil {
		t.Fatalf("tupper keys create %s: %v", strings.Join(args, " "), err)
	}
	key := strings.TrimSpace(string(out))
	d.otherKeys = append(d.otherKeys, key)
	return key
}

// sandboxIDs lists the ids of every running or paused sandbox of the key's
// team.
func (d *serveDaemon) sandboxIDs(ctx context.Context, t testing.TB) []string {
	var ids []string
	next := ""
	for {
		path := "/v2/sandboxes?limit=100"
		if next != "" {
			path += "&nextToken=" + next
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+path, nil)
		req.Header.Set("X-API-KEY", d.Key)
		resp, err := d.http.Do(req)
		if err != nil {
			t.Errorf("list sandboxes: %v", err)
			return ids
		}
		var page []struct {
			SandboxID string `json:"sandboxID"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Errorf("list sandboxes: %s, %v", resp.Status, err)
			return ids
		}
		for _, p := range page {
			ids = append(ids, p.SandboxID)
		}
		if next = resp.Header.Get("X-Next-Token"); next == "" {
			return ids
		}
	}
}

// api sends one control-plane request with the daemon's API key; body, when
// not nil, is sent as JSON. It returns the status and the response body.
func (d *serveDaemon) api(ctx context.Context, method, path string, body any) (int, []byte, error) {
	return d.apiKey(ctx, d.Key, method, path, body)
}

// apiKey is api with key.
func (d *serveDaemon) apiKey(ctx context.Context, key, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("X-API-KEY", key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// tailLines returns the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("… (%d earlier lines)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
