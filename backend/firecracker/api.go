package firecracker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// The bodies of the Firecracker API requests the backend makes (its
// swagger, firecracker/swagger.yaml of v1.x). Only the fields the backend
// sets are here.
type (
	machineConfig struct {
		VCPUCount  int   `json:"vcpu_count"`
		MemSizeMiB int64 `json:"mem_size_mib"`
		SMT        bool  `json:"smt"`
	}
	bootSource struct {
		KernelImagePath string `json:"kernel_image_path"`
		InitrdPath      string `json:"initrd_path,omitempty"`
		BootArgs        string `json:"boot_args,omitempty"`
	}
	drive struct {
		DriveID      string `json:"drive_id"`
		PathOnHost   string `json:"path_on_host"`
		IsRootDevice bool   `json:"is_root_device"`
		IsReadOnly   bool   `json:"is_read_only"`
	}
	vsockDevice struct {
		GuestCID uint32 `json:"guest_cid"`
		UDSPath  string `json:"uds_path"`
	}
	instanceAction struct {
		ActionType string `json:"action_type"`
	}
	vmState struct {
		State string `json:"state"`
	}
	// snapshotCreate is PUT /snapshot/create's body: a full snapshot
	// (the whole guest memory), which needs no dirty page tracking.
	snapshotCreate struct {
		SnapshotType string `json:"snapshot_type"`
		SnapshotPath string `json:"snapshot_path"`
		MemFilePath  string `json:"mem_file_path"`
	}
	// snapshotLoad is PUT /snapshot/load's body. It leaves out
	// track_dirty_pages (enable_diff_snapshots, deprecated, in older
	// releases),
	// which only diff snapshots need, and the overrides of later
	// releases: the drives and the vsock socket are found at the paths
	// they had when the snapshot was made.
	snapshotLoad struct {
		SnapshotPath string        `json:"snapshot_path"`
		MemBackend   memoryBackend `json:"mem_backend"`
		ResumeVM     bool          `json:"resume_vm"`
	}
	memoryBackend struct {
		BackendType string `json:"backend_type"` // "File" or "Uffd"
		BackendPath string `json:"backend_path"`
	}
	// instanceInfo is GET /'s answer.
	instanceInfo struct {
		ID         string `json:"id"`
		State      string `json:"state"` // "Not started", "Running" or "Paused"
		VMMVersion string `json:"vmm_version"`
		AppName    string `json:"app_name"`
	}
	// apiFault is the body of every error answer.
	apiFault struct {
		FaultMessage string `json:"fault_message"`
	}
)

// Firecracker's instance states, in GET /.
const (
	instanceNotStarted = "Not started"
	instanceRunning    = "Running"
	instancePaused     = "Paused"
)

// APIError is an error answer of Firecracker's API.
type APIError struct {
	Method, Path string
	Status       int
	// Fault is Firecracker's fault_message.
	Fault string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("firecracker API %s %s: %d: %s", e.Method, e.Path, e.Status, e.Fault)
}

// apiClient talks to one Firecracker process over its API socket. It is
// safe for concurrent use.
type apiClient struct {
	http *http.Client
}

// newAPIClient returns a client of the API socket at sock.
func newAPIClient(sock string) *apiClient {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialUnix(ctx, sock)
		},
		// One VMM, few calls: no pool to keep warm between them.
		DisableKeepAlives: true,
	}
	return &apiClient{http: &http.Client{Transport: tr}}
}

// patch and get make one API call; body is encoded as JSON and out, when
// not nil, decoded from the answer.
func (c *apiClient) patch(ctx context.Context, path string, body any) error {
	return c.do(ctx, http.MethodPatch, path, body, nil)
}

func (c *apiClient) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, out)
}

func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	// The host part is never resolved: DialContext goes to the socket.
	req, err := http.NewRequestWithContext(ctx, method, "http://firecracker"+path, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("firecracker API %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("firecracker API %s %s: %w", method, path, err)
	}
	if res.StatusCode/100 != 2 {
		var f apiFault
		if json.Unmarshal(b, &f) != nil || f.FaultMessage == "" {
			f.FaultMessage = strings.TrimSpace(string(b))
		}
		return &APIError{Method: method, Path: path, Status: res.StatusCode, Fault: f.FaultMessage}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("firecracker API %s %s: answer %q: %w", method, path, b, err)
		}
	}
	return nil
}

// close drops the client's connections.
func (c *apiClient) close() { c.http.CloseIdleConnections() }

// vmConfig is what boot sends Firecracker before it starts the microVM.
// Paths are as Firecracker sees them: inside its chroot when jailed,
// relative to its working directory when not.
type vmConfig struct {
	VCPUs      int
	MemSizeMiB int64
	Kernel     string
	Initrd     string
	BootArgs   string
	BaseDisk   string
	RWDisk     string
	VsockPath  string
}

// The drive ids of the two disks.
const (
	baseDriveID = "base"
	rwDriveID   = "rw"
)

// bootSteps are the calls that configure and start a microVM, in order,
// each named for the errors it fails with.
func bootSteps(vm vmConfig) []apiCall {
	return []apiCall{
		{"machine config", http.MethodPut, "/machine-config", machineConfig{VCPUCount: vm.VCPUs, MemSizeMiB: vm.MemSizeMiB}},
		{"boot source", http.MethodPut, "/boot-source", bootSource{KernelImagePath: vm.Kernel, InitrdPath: vm.Initrd, BootArgs: vm.BootArgs}},
		// Neither disk is the root device: the kernel boots the
		// initramfs, whose init finds both by their labels.
		{"image disk", http.MethodPut, "/drives/" + baseDriveID, drive{DriveID: baseDriveID, PathOnHost: vm.BaseDisk, IsReadOnly: true}},
		{"writable disk", http.MethodPut, "/drives/" + rwDriveID, drive{DriveID: rwDriveID, PathOnHost: vm.RWDisk}},
		{"vsock", http.MethodPut, "/vsock", vsockDevice{GuestCID: GuestCID, UDSPath: vm.VsockPath}},
		{"start", http.MethodPut, "/actions", instanceAction{ActionType: "InstanceStart"}},
	}
}

// apiCall is one call of a sequence.
type apiCall struct {
	step   string
	method string
	path   string
	body   any
}

// run makes the calls in order and stops at the first failure.
func (c *apiClient) run(ctx context.Context, calls []apiCall) error {
	for _, call := range calls {
		if err := c.do(ctx, call.method, call.path, call.body, nil); err != nil {
			return fmt.Errorf("%s: %w", call.step, err)
		}
	}
	return nil
}

// pause and resume freeze and thaw the microVM's vCPUs.
func (c *apiClient) pause(ctx context.Context) error {
	return c.patch(ctx, "/vm", vmState{State: "Paused"})
}

func (c *apiClient) resume(ctx context.Context) error {
	return c.patch(ctx, "/vm", vmState{State: "Resumed"})
}

// createSnapshot writes a full snapshot of the paused microVM: its state
// to statePath and its memory to memPath, paths as the VMM sees them.
// Firecracker resets the guest's vsock connections as it does.
func (c *apiClient) createSnapshot(ctx context.Context, statePath, memPath string) error {
	return c.do(ctx, http.MethodPut, "/snapshot/create", snapshotCreate{SnapshotType: "Full", SnapshotPath: statePath, MemFilePath: memPath}, nil)
}

// loadSnapshot makes the fresh VMM the microVM of a snapshot, its memory
// mapped from the file at memPath, and runs it. It must be the VMM's first
// configuration; a VMM whose load failed exits.
func (c *apiClient) loadSnapshot(ctx context.Context, statePath, memPath string) error {
	return c.do(ctx, http.MethodPut, "/snapshot/load", snapshotLoad{
		SnapshotPath: statePath,
		MemBackend:   memoryBackend{BackendType: "File", BackendPath: memPath},
		ResumeVM:     true,
	}, nil)
}

// info returns GET /.
func (c *apiClient) info(ctx context.Context) (*instanceInfo, error) {
	var i instanceInfo
	if err := c.get(ctx, "/", &i); err != nil {
		return nil, err
	}
	return &i, nil
}
