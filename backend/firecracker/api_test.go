package firecracker

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// apiCallRecord is one request an API server got: its method, path and
// body, as sent.
type apiCallRecord struct {
	Method, Path, Body string
}

// apiRecorder is an HTTP server on a unix socket, as Firecracker's API is,
// that records every request and answers 204, or the fault set for a
// call.
type apiRecorder struct {
	sock string

	mu     sync.Mutex
	calls  []apiCallRecord
	faults map[string]string // "PUT /vsock" → fault message
	info   string            // GET /'s body
}

func newAPIRecorder(t *testing.T, sock string) *apiRecorder {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	r := &apiRecorder{sock: sock, faults: map[string]string{},
		info: `{"id":"sb1","state":"Running","vmm_version":"1.16.1","app_name":"Firecracker"}`}
	srv := &http.Server{Handler: r}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return r
}

func (r *apiRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, apiCallRecord{req.Method, req.URL.Path, string(body)})
	if req.Method != http.MethodGet && req.Header.Get("Content-Type") != "application/json" {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"fault_message":"no JSON content type"}`)
		return
	}
	if msg, ok := r.faults[req.Method+" "+req.URL.Path]; ok {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, msg)
		return
	}
	if req.Method == http.MethodGet && req.URL.Path == "/" {
		io.WriteString(w, r.info)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *apiRecorder) recorded() []apiCallRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]apiCallRecord(nil), r.calls...)
}

func testVM() vmConfig {
	return vmConfig{
		VCPUs: 2, MemSizeMiB: 256,
		Kernel: "/vmlinux", Initrd: "/initramfs.cpio", BootArgs: "console=ttyS0 rdinit=/init",
		BaseDisk: "/base.ext4", RWDisk: "/rw.ext4", VsockPath: "/v.sock",
	}
}

// bootCalls are the calls that boot testVM, exactly as Firecracker's API
// must receive them.
var bootCalls = []apiCallRecord{
	{"PUT", "/machine-config", `{"vcpu_count":2,"mem_size_mib":256,"smt":false}`},
	{"PUT", "/boot-source", `{"kernel_image_path":"/vmlinux","initrd_path":"/initramfs.cpio","boot_args":"console=ttyS0 rdinit=/init"}`},
	{"PUT", "/drives/base", `{"drive_id":"base","path_on_host":"/base.ext4","is_root_device":false,"is_read_only":true}`},
	{"PUT", "/drives/rw", `{"drive_id":"rw","path_on_host":"/rw.ext4","is_root_device":false,"is_read_only":false}`},
	{"PUT", "/vsock", `{"guest_cid":3,"uds_path":"/v.sock"}`},
	{"PUT", "/actions", `{"action_type":"InstanceStart"}`},
}

func TestAPIBoot(t *testing.T) {
	r := newAPIRecorder(t, filepath.Join(t.TempDir(), "api.sock"))
	c := newAPIClient(r.sock)
	defer c.close()
	if err := c.run(t.Context(), bootSteps(testVM())); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(bootCalls, r.recorded()); d != "" {
		t.Errorf("boot calls (-want +got):\n%s", d)
	}
}

func TestAPIOperations(t *testing.T) {
	tests := []struct {
		name string
		do   func(*apiClient, context.Context) error
		want []apiCallRecord
	}{
		{"pause", (*apiClient).pause, []apiCallRecord{{"PATCH", "/vm", `{"state":"Paused"}`}}},
		{"resume", (*apiClient).resume, []apiCallRecord{{"PATCH", "/vm", `{"state":"Resumed"}`}}},
		// A full snapshot needs no dirty page tracking; the paths are
		// the VMM's own.
		{"create snapshot", func(c *apiClient, ctx context.Context) error {
			return c.createSnapshot(ctx, "/checkpoint.vmstate", "/checkpoint.mem")
		}, []apiCallRecord{{"PUT", "/snapshot/create", `{"snapshot_type":"Full","snapshot_path":"/checkpoint.vmstate","mem_file_path":"/checkpoint.mem"}`}}},
		// The memory from a file, mapped as the guest reads it, and the
		// microVM resumed by the load itself.
		{"load snapshot", func(c *apiClient, ctx context.Context) error {
			return c.loadSnapshot(ctx, "restore.vmstate", "restore.mem")
		}, []apiCallRecord{{"PUT", "/snapshot/load", `{"snapshot_path":"restore.vmstate","mem_backend":{"backend_type":"File","backend_path":"restore.mem"},"resume_vm":true}`}}},
		{"info", func(c *apiClient, ctx context.Context) error {
			i, err := c.info(ctx)
			if err == nil && (i.State != instanceRunning || i.VMMVersion != "1.16.1") {
				t.Errorf("info = %+v", i)
			}
			return err
		}, []apiCallRecord{{"GET", "/", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newAPIRecorder(t, filepath.Join(t.TempDir(), "api.sock"))
			c := newAPIClient(r.sock)
			defer c.close()
			if err := tt.do(c, t.Context()); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, r.recorded()); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
		})
	}
}

// TestAPIFaults checks that a failing call stops the sequence there and
// that Firecracker's fault message, JSON or not, reaches the error.
func TestAPIFaults(t *testing.T) {
	for i, call := range bootCalls {
		t.Run(call.Path, func(t *testing.T) {
			r := newAPIRecorder(t, filepath.Join(t.TempDir(), "api.sock"))
			msg := `{"fault_message":"Invalid request: ` + call.Path + `"}`
			wantFault := "Invalid request: " + call.Path
			if i%2 == 1 {
				msg, wantFault = "plain text fault", "plain text fault"
			}
			r.faults[call.Method+" "+call.Path] = msg
			c := newAPIClient(r.sock)
			defer c.close()
			err := c.run(t.Context(), bootSteps(testVM()))
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Fault != wantFault || apiErr.Status != 400 || apiErr.Path != call.Path {
				t.Fatalf("err = %v (%#v), want an APIError with fault %q", err, apiErr, wantFault)
			}
			if d := cmp.Diff(bootCalls[:i+1], r.recorded()); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
		})
	}
}

// TestAPILongSocketPath reaches an API socket whose path is too long for a
// socket address, as a deep state directory's are.
func TestAPILongSocketPath(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < 150 {
		dir = filepath.Join(dir, "a-directory-of-some-length")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "linux" {
		t.Skip("the long path is reached through /proc/self/fd")
	}
	// The server binds by a relative path, as Firecracker does without
	// the jailer.
	t.Chdir(dir)
	r := newAPIRecorder(t, "api.sock")
	c := newAPIClient(filepath.Join(dir, "api.sock"))
	defer c.close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.info(ctx); err != nil {
		t.Fatalf("GET / over %d-byte socket path: %v", len(filepath.Join(dir, "api.sock")), err)
	}
	if got := r.recorded(); len(got) != 1 {
		t.Errorf("calls %v", got)
	}
}

// TestAPIUnreachable checks the error of a VMM that serves no API.
func TestAPIUnreachable(t *testing.T) {
	c := newAPIClient(filepath.Join(t.TempDir(), "none.sock"))
	defer c.close()
	_, err := c.info(t.Context())
	if err == nil || !strings.Contains(err.Error(), "GET /") {
		t.Errorf("err = %v", err)
	}
}
