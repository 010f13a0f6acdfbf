package firecracker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	pb "github.com/lightbearco/tupper/proto/process"
	"github.com/lightbearco/tupper/proto/process/processconnect"
)

const testToken = "t0ken-of-the-test"

// testSpec is a sandbox of the test image with the real agent.
func testSpec(t *testing.T, id string) *backend.Spec {
	t.Helper()
	return &backend.Spec{
		ID:     id,
		RootFS: testutil.TestRootFS(t),
		Env:    []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TUPPER_ACCESS_TOKEN=" + testToken},
		Agent:  backend.Agent{Path: testutil.AgentBinary(t), Args: []string{"--addr", ":49983"}},
		Resources: backend.Resources{
			MemoryBytes: 256 << 20,
			DiskBytes:   64 << 20,
		},
	}
}

func startCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startSteps are Start's steps without the jailer, in order.
var startSteps = []string{"claim", "initramfs", "image disk", "files", "writable disk", "cgroup", "spawn", "api socket", "boot", "record"}

// TestStartUndoesEveryStep makes Start fail right after each of its steps
// and checks that nothing of the sandbox is left: no file but the cache,
// no process, mount, loop device or cgroup, of the VMM or of the guest.
func TestStartUndoesEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots stand-in guests")
	}
	b := newStandInBackend(t)
	for i, step := range startSteps {
		t.Run(step, func(t *testing.T) {
			id := fmt.Sprintf("undo%d", i)
			b.failAt = step
			defer func() { b.failAt = "" }()
			_, err := b.Start(startCtx(t), testSpec(t, id))
			if err == nil || !strings.Contains(err.Error(), "injected failure after step "+step) {
				t.Fatalf("Start = %v, want the injected failure", err)
			}
			noLeftovers(t, b, id)
			if _, err := b.State(t.Context(), id); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("State after the failed Start: %v, want not found", err)
			}
		})
	}
}

// TestStartAPIFaults has the VMM refuse each API call of the boot in turn:
// Start fails with Firecracker's fault and the step, and leaves nothing.
func TestStartAPIFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots stand-in guests")
	}
	b := newStandInBackend(t)
	for i, call := range bootCalls {
		t.Run(call.Method+call.Path, func(t *testing.T) {
			t.Setenv("TUPPER_FAKEFC_FAIL", call.Method+" "+call.Path)
			id := fmt.Sprintf("fault%d", i)
			_, err := b.Start(startCtx(t), testSpec(t, id))
			var apiErr *APIError
			if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Fault, "injected failure of "+call.Method+" "+call.Path) {
				t.Fatalf("Start = %v, want the VMM's fault", err)
			}
			noLeftovers(t, b, id)
		})
	}
}

// TestStartVMMDies checks a VMM that exits before it serves its API: Start
// says so with the VMM's own words, and leaves nothing.
func TestStartVMMDies(t *testing.T) {
	needsStandInHost(t)
	fake := filepath.Join(t.TempDir(), "firecracker")
	os.WriteFile(fake, []byte("#!/bin/sh\necho 'Error: unable to open /dev/kvm' >&2\nexit 1\n"), 0o755)
	b, err := New(Config{Root: t.TempDir(), Logger: testLogger(), FirecrackerPath: fake, NoJailer: true, KernelDir: fakeKernelDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Start(startCtx(t), testSpec(t, "dies"))
	if err == nil || !strings.Contains(err.Error(), "exited before it served its API") || !strings.Contains(err.Error(), "unable to open /dev/kvm") {
		t.Fatalf("Start = %v", err)
	}
	noLeftovers(t, b, "dies")
}

// recordedCalls reads the stand-in's record of API calls.
func recordedCalls(t *testing.T, path string) []apiCallRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []apiCallRecord
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		var c struct{ Method, Path, Body string }
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, apiCallRecord{c.Method, c.Path, c.Body})
	}
	return out
}

// TestOperations runs a sandbox through its life and checks the exact
// API calls each operation makes, State along the way, and the ports
// reached through DialSandbox: the agent's own vsock port, a server of
// the sandbox's through the forwarding port, and a closed port.
func TestOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots a stand-in guest")
	}
	record := filepath.Join(t.TempDir(), "api.jsonl")
	t.Setenv("TUPPER_FAKEFC_RECORD", record)
	b := newStandInBackend(t)
	const id = "ops1"
	spec := testSpec(t, id)
	spec.Resources.CPUs = 1.5
	sb, err := b.Start(startCtx(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != id || sb.Pid == 0 || !strings.HasSuffix(sb.AgentAddr, "v.sock:49983") {
		t.Errorf("Start = %+v", sb)
	}

	// Start: GET / until the API answers, then the boot.
	calls := recordedCalls(t, record)
	i := 0
	for i < len(calls) && calls[i].Method == "GET" && calls[i].Path == "/" {
		i++
	}
	if i == 0 {
		t.Errorf("Start did not wait for the API with GET /: %v", calls)
	}
	initramfs, _ := filepath.Glob(filepath.Join(b.cache, "initramfs-*.cpio"))
	image, _ := filepath.Glob(filepath.Join(b.cache, "image-*.ext4"))
	if len(initramfs) != 1 || len(image) != 1 {
		t.Fatalf("cache: initramfs %v, image %v", initramfs, image)
	}
	want := []apiCallRecord{
		{"PUT", "/machine-config", `{"vcpu_count":2,"mem_size_mib":256,"smt":false}`},
		{"PUT", "/boot-source", `{"kernel_image_path":"` + b.kernel + `","initrd_path":"` + initramfs[0] + `","boot_args":"console=ttyS0 reboot=k panic=1 pci=off quiet rdinit=/init"}`},
		// The disks relative to the VMM's working directory, the
		// sandbox's, as a snapshot restored into another needs them.
		{"PUT", "/drives/base", `{"drive_id":"base","path_on_host":"base.ext4","is_root_device":false,"is_read_only":true}`},
		{"PUT", "/drives/rw", `{"drive_id":"rw","path_on_host":"rw.ext4","is_root_device":false,"is_read_only":false}`},
		{"PUT", "/vsock", `{"guest_cid":3,"uds_path":"v.sock"}`},
		{"PUT", "/actions", `{"action_type":"InstanceStart"}`},
	}
	if d := cmp.Diff(want, calls[i:]); d != "" {
		t.Errorf("Start's calls after the wait (-want +got):\n%s", d)
	}
	var linked, cached syscall.Stat_t
	syscall.Stat(filepath.Join(b.sandboxDir(id), "base.ext4"), &linked)
	syscall.Stat(image[0], &cached)
	if linked.Ino != cached.Ino {
		t.Errorf("base.ext4 in the sandbox's directory is not a link to the cached %s", image[0])
	}

	// Each later operation: the calls it adds.
	since := len(calls)
	step := func(name string, wantState backend.State, wantCalls ...apiCallRecord) {
		t.Helper()
		st, err := b.State(t.Context(), id)
		if err != nil || st != wantState {
			t.Errorf("%s: State = %q, %v; want %q", name, st, err, wantState)
		}
		calls := recordedCalls(t, record)
		got := calls[since:]
		since = len(calls)
		// State's own GET / comes last.
		wantCalls = append(wantCalls, apiCallRecord{"GET", "/", ""})
		if d := cmp.Diff(wantCalls, got); d != "" {
			t.Errorf("%s: calls (-want +got):\n%s", name, d)
		}
	}
	step("running", backend.StateRunning)
	if err := b.Pause(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	step("pause", backend.StatePaused, apiCallRecord{"PATCH", "/vm", `{"state":"Paused"}`})
	if err := b.Resume(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	step("resume", backend.StateRunning, apiCallRecord{"PATCH", "/vm", `{"state":"Resumed"}`})

	// The agent's port, over vsock.
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		_, port, _ := net.SplitHostPort(addr)
		var p int
		fmt.Sscan(port, &p)
		return b.DialSandbox(ctx, id, p)
	}}}
	// The stand-in guest's agent may still be coming up on a loaded host:
	// a refused connection is tried again for a while.
	var res *http.Response
	for deadline := time.Now().Add(20 * time.Second); ; {
		if res, err = client.Get("http://sandbox:49983/health"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Errorf("GET /health: %s", res.Status)
	}
	// A closed port is refused, as TCP would refuse it.
	if _, err := b.DialSandbox(t.Context(), id, 8000); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("DialSandbox to a closed port: %v, want ECONNREFUSED", err)
	}
	// A server of the sandbox's, through the forwarding port.
	proc := processconnect.NewProcessClient(&http.Client{Transport: tokenRoundTripper{client.Transport}}, "http://sandbox:49983", connect.WithProtoJSON())
	sctx, stop := context.WithCancel(t.Context())
	defer stop()
	stream, err := proc.Start(sctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{
		Cmd: "/bin/bash", Args: []string{"-c", "mkdir -p /tmp/www && echo served > /tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 8000"},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	go func() {
		for stream.Receive() {
		}
	}()
	testutil.WaitFor(t, 30*time.Second, "the sandbox's server on port 8000", func() bool {
		res, err := client.Get("http://sandbox:8000/index.html")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode == 200 && string(body) == "served\n"
	})

	// Stop kills the VMM: no API call; then nothing is left.
	if err := b.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if got := recordedCalls(t, record)[since:]; len(got) > 0 {
		t.Errorf("Stop made API calls: %v", got)
	}
	noLeftovers(t, b, id)
	if _, err := b.State(t.Context(), id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State after Stop: %v", err)
	}
	if _, err := b.DialSandbox(t.Context(), id, 49983); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("DialSandbox after Stop: %v", err)
	}
	if err := b.Pause(t.Context(), id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Pause after Stop: %v", err)
	}
	if err := b.Stop(t.Context(), id); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
}

// tokenRoundTripper adds the sandbox's access token.
type tokenRoundTripper struct{ next http.RoundTripper }

func (t tokenRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Access-Token", testToken)
	return t.next.RoundTrip(r)
}

// TestStateOfADeadVMM checks that a VMM gone on its own makes the sandbox
// stopped, not unknown, until Stop.
func TestStateOfADeadVMM(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots a stand-in guest")
	}
	b := newStandInBackend(t)
	const id = "dead1"
	if _, err := b.Start(startCtx(t), testSpec(t, id)); err != nil {
		t.Fatal(err)
	}
	b.crashVMM(t, id)
	wctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := b.Wait(wctx, id); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if st, err := b.State(t.Context(), id); err != nil || st != backend.StateStopped {
		t.Errorf("State = %q, %v; want stopped", st, err)
	}
	if ids, _ := b.List(t.Context()); len(ids) != 1 || ids[0] != id {
		t.Errorf("List = %v", ids)
	}
	if err := b.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, b, id)
}
