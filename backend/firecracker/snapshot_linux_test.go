package firecracker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// restoreSteps are Restore's steps without the jailer, in order.
var restoreSteps = []string{"claim", "image disk", "files", "writable disk", "cgroup", "spawn", "api socket", "load", "record"}

// checkpointSteps are Checkpoint's steps, in order.
var checkpointSteps = []string{"pause", "snapshot", "memory", "disk", "manifest"}

// guestClient reaches sandbox id's ports through b.DialSandbox, with the
// test's access token.
func guestClient(b *Backend, id string) *http.Client {
	return &http.Client{Transport: tokenRoundTripper{&http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var p int
			fmt.Sscan(port, &p)
			return b.DialSandbox(ctx, id, p)
		},
	}}}
}

// waitAgent waits until sandbox id's agent answers over its vsock.
func waitAgent(t *testing.T, b *Backend, id string) {
	t.Helper()
	client := guestClient(b, id)
	testutil.WaitFor(t, 30*time.Second, id+"'s agent", func() bool {
		res, err := client.Get("http://sandbox:49983/health")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusNoContent
	})
}

// guestRun runs script with bash in sandbox id and returns its standard
// output; it fails the test unless the script exits 0.
func guestRun(t *testing.T, b *Backend, id, script string) string {
	t.Helper()
	proc := processconnect.NewProcessClient(guestClient(b, id), "http://sandbox:49983", connect.WithProtoJSON())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stream, err := proc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", script}}}))
	if err != nil {
		t.Fatalf("run %q in %s: %v", script, id, err)
	}
	defer stream.Close()
	var out, errOut strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
			errOut.Write(d.GetStderr())
		}
		if end := ev.GetEnd(); end != nil {
			if end.GetExitCode() != 0 {
				t.Fatalf("run %q in %s: exit %d: %s", script, id, end.GetExitCode(), errOut.String())
			}
			return out.String()
		}
	}
	t.Fatalf("run %q in %s: no end: %v", script, id, stream.Err())
	return ""
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

func inode(t *testing.T, path string) (ino uint64, mode uint32, uid, gid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino, st.Mode & 0o7777, st.Uid, st.Gid
}

// callsSince returns the calls recorded after the first n.
func callsSince(t *testing.T, record string, n int) []apiCallRecord {
	t.Helper()
	calls := recordedCalls(t, record)
	return calls[n:]
}

// withoutWaits drops the GET / of the wait for a fresh VMM's API, and
// fails the test if there was none.
func withoutWaits(t *testing.T, calls []apiCallRecord) []apiCallRecord {
	t.Helper()
	i := 0
	for i < len(calls) && calls[i].Method == "GET" && calls[i].Path == "/" {
		i++
	}
	if i == 0 {
		t.Errorf("no wait for the new VMM's API (GET /) in %v", calls)
	}
	return calls[i:]
}

func numRecorded(t *testing.T, record string) int {
	if _, err := os.Stat(record); err != nil {
		return 0
	}
	return len(recordedCalls(t, record))
}

// TestCheckpointRestoreStandInFrozenGuest checkpoints a running sandbox,
// stops it, and restores it in a new VMM: the exact API calls of each, the
// checkpoint's files and manifest, the vsock connection the snapshot
// closes, the restored VMM's files, and the guest as it was. The stand-in
// saves no memory: its snapshot keeps the guest's runc sandbox frozen and
// its load thaws it (internal/fakefirecracker/snapshot.go), so that the
// backend's code paths run end to end; that a process and a file come
// back shows that hand-over, which real Firecracker does with the guest's
// memory and the copied disk.
func TestCheckpointRestoreStandInFrozenGuest(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots stand-in guests")
	}
	record := filepath.Join(t.TempDir(), "api.jsonl")
	t.Setenv("TUPPER_FAKEFC_RECORD", record)
	b := newStandInBackend(t)
	const id = "ckpt1"
	spec := testSpec(t, id)
	if _, err := b.Start(startCtx(t), spec); err != nil {
		t.Fatal(err)
	}
	waitAgent(t, b, id)
	// A process that runs on, and a file, of the guest's.
	pid := strings.TrimSpace(guestRun(t, b, id, "setsid sleep 600 >/dev/null 2>&1 </dev/null & echo $!; echo kept > /tmp/kept"))
	// A connection to the agent open through the snapshot.
	conn, err := b.DialSandbox(t.Context(), id, backend.AgentPort)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	since := numRecorded(t, record)
	dir := filepath.Join(t.TempDir(), "checkpoint") // Checkpoint makes it
	if err := b.checkpoint(t.Context(), id, dir); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	want := []apiCallRecord{
		{"GET", "/", ""},
		{"PATCH", "/vm", `{"state":"Paused"}`},
		{"PUT", "/snapshot/create", `{"snapshot_type":"Full","snapshot_path":"checkpoint.vmstate","mem_file_path":"checkpoint.mem"}`},
	}
	if d := cmp.Diff(want, callsSince(t, record, since)); d != "" {
		t.Errorf("Checkpoint's calls (-want +got):\n%s", d)
	}
	if st, err := b.State(t.Context(), id); err != nil || st != backend.StatePaused {
		t.Errorf("State after Checkpoint = %q, %v; want paused", st, err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("a connection open through the snapshot: read %v, want EOF (the vsock reset)", err)
	}

	m, err := readManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := imageKey(spec)
	sum, _ := fileSum(spec.Agent.Path)
	wantM := manifest{
		Format: snapshotFormat, Backend: "firecracker", ID: id, CreatedAt: m.CreatedAt,
		VMMVersion: "1.16.1-stand-in", AgentSum: sum, ImageKey: key,
		VCPUs: 1, MemoryMiB: 256, CPUs: 1, DiskBytes: 64 << 20, Files: m.Files,
	}
	if d := cmp.Diff(wantM, *m); d != "" {
		t.Errorf("manifest (-want +got):\n%s", d)
	}
	var names []string
	for _, f := range m.Files {
		names = append(names, f.Name)
		if _, mode, _, _ := inode(t, filepath.Join(dir, f.Name)); mode != 0o600 {
			t.Errorf("%s: mode %o, want 0600", f.Name, mode)
		}
	}
	if !slices.Equal(names, snapshotFiles) {
		t.Errorf("manifest lists %v", names)
	}
	if left, _ := filepath.Glob(filepath.Join(b.sandboxDir(id), "checkpoint.*")); len(left) > 0 {
		t.Errorf("the VMM's snapshot files stayed in its root: %v", left)
	}
	// The disk: a copy (not the sandbox's own file), whole.
	rw := filepath.Join(b.sandboxDir(id), rwDiskName)
	if a, _, _, _ := inode(t, rw); func() bool { c, _, _, _ := inode(t, filepath.Join(dir, rwDiskName)); return a == c }() {
		t.Error("the checkpoint's disk is the sandbox's own file")
	}
	if fileSHA(t, rw) != fileSHA(t, filepath.Join(dir, rwDiskName)) {
		t.Error("the checkpoint's disk differs from the paused sandbox's")
	}
	if out, err := exec.Command("e2fsck", "-fn", filepath.Join(dir, rwDiskName)).CombinedOutput(); err != nil {
		t.Errorf("e2fsck of the checkpoint's disk: %v\n%s", err, out)
	}
	// The stand-in says what its memory file is not.
	if mem, _ := os.ReadFile(filepath.Join(dir, snapMemName)); !strings.Contains(string(mem), "not a memory snapshot") {
		t.Errorf("the stand-in's memory file: %q", mem)
	}

	if err := b.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	since = numRecorded(t, record)
	sb, err := b.Restore(startCtx(t), spec, dir)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if sb.ID != id || sb.Pid == 0 {
		t.Errorf("Restore = %+v", sb)
	}
	want = []apiCallRecord{
		{"PUT", "/snapshot/load", `{"snapshot_path":"restore.vmstate","mem_backend":{"backend_type":"File","backend_path":"restore.mem"},"resume_vm":true}`},
	}
	if d := cmp.Diff(want, withoutWaits(t, callsSince(t, record, since))); d != "" {
		t.Errorf("Restore's calls after the wait (-want +got):\n%s", d)
	}
	if st, err := b.State(t.Context(), id); err != nil || st != backend.StateRunning {
		t.Errorf("State after Restore = %q, %v; want running", st, err)
	}
	waitAgent(t, b, id)
	if got := guestRun(t, b, id, "cat /tmp/kept; kill -0 "+pid+" && echo alive"); got != "kept\nalive\n" {
		t.Errorf("the guest after Restore: %q, want its file and its process", got)
	}
	// The VMM maps the checkpoint's memory, linked, not copied, and not
	// writable; its disk is a copy of its own.
	memIno, memMode, _, _ := inode(t, filepath.Join(b.sandboxDir(id), restoreMemName))
	if ckIno, _, _, _ := inode(t, filepath.Join(dir, snapMemName)); memIno != ckIno || memMode != 0o640 {
		t.Errorf("restore.mem: inode %d mode %o; want a link to the checkpoint's memory (%d), 0640", memIno, memMode, ckIno)
	}
	if a, _, _, _ := inode(t, filepath.Join(b.sandboxDir(id), rwDiskName)); func() bool { c, _, _, _ := inode(t, filepath.Join(dir, rwDiskName)); return a == c }() {
		t.Error("the restored sandbox writes the checkpoint's disk")
	}
	rec, err := b.readRecord(id)
	if err != nil || rec.RestoredFrom != dir || rec.MemoryMiB != 256 || rec.AgentSum != sum {
		t.Errorf("record = %+v, %v", rec, err)
	}

	if err := b.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, b, id)
	if _, err := readManifest(dir); err != nil {
		t.Errorf("the checkpoint after its sandbox was restored and stopped: %v", err)
	}

	// The stand-in's snapshot held one guest, now gone: its second load
	// is refused by the VMM, which exits, and the restore leaves nothing.
	_, err = b.Restore(startCtx(t), spec, dir)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Path != "/snapshot/load" || !strings.Contains(apiErr.Fault, "no longer holds its guest") {
		t.Errorf("a second Restore of the stand-in's snapshot = %v, want the VMM's refusal of the load", err)
	}
	noLeftovers(t, b, id)
}

// TestCheckpointUndoesEveryStep makes Checkpoint fail right after each of
// its steps: the sandbox runs again, and neither the checkpoint directory
// it made nor the VMM's snapshot files are left. A checkpoint that fails
// on a paused sandbox leaves it paused, and the directory it replaced an
// older checkpoint in without one. A stand-in snapshot nobody loads goes
// after its time to live.
func TestCheckpointUndoesEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots stand-in guests")
	}
	record := filepath.Join(t.TempDir(), "api.jsonl")
	t.Setenv("TUPPER_FAKEFC_RECORD", record)
	t.Setenv("TUPPER_FAKEFC_SNAPSHOT_TTL", "1s")
	b := newStandInBackend(t)
	const id = "cundo1"
	if _, err := b.Start(startCtx(t), testSpec(t, id)); err != nil {
		t.Fatal(err)
	}
	for _, step := range checkpointSteps {
		t.Run(step, func(t *testing.T) {
			b.failAt = step
			defer func() { b.failAt = "" }()
			dir := filepath.Join(t.TempDir(), "checkpoint")
			if err := b.checkpoint(t.Context(), id, dir); err == nil || !strings.Contains(err.Error(), "injected failure after step "+step) {
				t.Fatalf("Checkpoint = %v, want the injected failure", err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the checkpoint directory it made is left: %v", err)
			}
			if left, _ := filepath.Glob(filepath.Join(b.sandboxDir(id), "checkpoint.*")); len(left) > 0 {
				t.Errorf("snapshot files left in the VMM's root: %v", left)
			}
			if st, err := b.State(t.Context(), id); err != nil || st != backend.StateRunning {
				t.Errorf("State = %q, %v; want running again", st, err)
			}
			waitAgent(t, b, id)
		})
	}

	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := b.checkpoint(t.Context(), id, dir); err != nil {
		t.Fatal(err)
	}
	since := numRecorded(t, record)
	b.failAt = "disk"
	err := b.checkpoint(t.Context(), id, dir)
	b.failAt = ""
	if err == nil {
		t.Fatal("the injected failure did not happen")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a failed checkpoint over an older one left %v", entries)
	}
	if st, _ := b.State(t.Context(), id); st != backend.StatePaused {
		t.Errorf("a sandbox paused before a failed checkpoint is %q", st)
	}
	for _, c := range callsSince(t, record, since) {
		if c.Method == "PATCH" {
			t.Errorf("a checkpoint of a paused sandbox called %v", c)
		}
	}
	if err := b.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	// Its stand-in snapshot, which nobody loads, goes with its guest.
	testutil.WaitFor(t, 30*time.Second, "the unloaded stand-in snapshot's guest to go", func() bool {
		return len(leftovers(t, b, id)) == 0
	})
}

// checkpointed starts sandbox id, checkpoints it into a new directory and
// stops it, and returns its spec and the directory.
func checkpointed(t *testing.T, b *Backend, id string) (*backend.Spec, string) {
	t.Helper()
	spec := testSpec(t, id)
	if _, err := b.Start(startCtx(t), spec); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "checkpoint-"+id)
	if err := b.checkpoint(t.Context(), id, dir); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	return spec, dir
}

// TestRestoreUndoesEveryStep makes Restore fail right after each of its
// steps, and refuses checkpoints it must not restore: nothing of the new
// sandbox is left, and the checkpoint stays restorable. Up to the load, one
// checkpoint serves every failure and is restored at the end; the
// stand-in's load hands its frozen guest over once, so the failures after
// it each take a checkpoint of their own.
func TestRestoreUndoesEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots stand-in guests")
	}
	b := newStandInBackend(t)
	spec, dir := checkpointed(t, b, "rsrc1")
	restoreAs := func(id string) *backend.Spec {
		s := *spec
		s.ID = id
		return &s
	}
	load := slices.Index(restoreSteps, "load")
	for i, step := range restoreSteps[:load] {
		t.Run(step, func(t *testing.T) {
			id := fmt.Sprintf("rundo%d", i)
			b.failAt = step
			defer func() { b.failAt = "" }()
			if _, err := b.Restore(startCtx(t), restoreAs(id), dir); err == nil || !strings.Contains(err.Error(), "injected failure after step "+step) {
				t.Fatalf("Restore = %v, want the injected failure", err)
			}
			noLeftovers(t, b, id)
		})
	}

	// Refused before anything is made.
	otherAgent := filepath.Join(t.TempDir(), "agent")
	os.WriteFile(otherAgent, []byte("another agent"), 0o755)
	refusals := []struct {
		name string
		spec func() *backend.Spec
		dir  func() string
		want string
	}{
		{"another image", func() *backend.Spec { s := restoreAs("rref1"); s.RootFS = t.TempDir(); return s }, func() string { return dir }, "made for image"},
		{"another agent", func() *backend.Spec { s := restoreAs("rref2"); s.Agent.Path = otherAgent; return s }, func() string { return dir }, "its guest runs agent"},
		{"another format", func() *backend.Spec { return restoreAs("rref3") }, func() string {
			return editedCopy(t, dir, func(m *manifest) { m.Format++ })
		}, "format 2"},
		{"memory cut short", func() *backend.Spec { return restoreAs("rref4") }, func() string {
			d := editedCopy(t, dir, func(*manifest) {})
			os.Truncate(filepath.Join(d, snapMemName), 3)
			return d
		}, "memory is 3 bytes"},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			s := r.spec()
			_, err := b.Restore(startCtx(t), s, r.dir())
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), r.want) {
				t.Fatalf("Restore = %v, want a refusal saying %q", err, r.want)
			}
			if _, err := os.Stat(b.sandboxDir(s.ID)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused restore made the sandbox's directory")
			}
			noLeftovers(t, b, s.ID)
		})
	}
	t.Run("no checkpoint", func(t *testing.T) {
		if _, err := b.Restore(startCtx(t), restoreAs("rref5"), t.TempDir()); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Restore from an empty directory = %v, want not found", err)
		}
	})
	// Refused once the VMM says its version: it is stopped.
	t.Run("another Firecracker", func(t *testing.T) {
		other := editedCopy(t, dir, func(m *manifest) { m.VMMVersion = "1.12.1" })
		_, err := b.Restore(startCtx(t), restoreAs("rref6"), other)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "made by Firecracker 1.12.1, this one is 1.16.1-stand-in") {
			t.Fatalf("Restore = %v, want the version refused", err)
		}
		noLeftovers(t, b, "rref6")
	})

	// After all that, the checkpoint restores.
	if _, err := b.Restore(startCtx(t), restoreAs("rdone"), dir); err != nil {
		t.Fatalf("Restore after the failed ones: %v", err)
	}
	waitAgent(t, b, "rdone")
	if err := b.Stop(t.Context(), "rdone"); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, b, "rdone")
	noLeftovers(t, b, "rsrc1")

	for i, step := range restoreSteps[load:] {
		t.Run(step, func(t *testing.T) {
			src := fmt.Sprintf("rsrc%d", i+2)
			spec, dir := checkpointed(t, b, src)
			id := fmt.Sprintf("rundo%d", load+i)
			s := *spec
			s.ID = id
			b.failAt = step
			defer func() { b.failAt = "" }()
			if _, err := b.Restore(startCtx(t), &s, dir); err == nil || !strings.Contains(err.Error(), "injected failure after step "+step) {
				t.Fatalf("Restore = %v, want the injected failure", err)
			}
			noLeftovers(t, b, id)
			noLeftovers(t, b, src)
		})
	}
}

// editedCopy copies checkpoint dir and edits the copy's manifest.
func editedCopy(t *testing.T, dir string, edit func(*manifest)) string {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", dir, cp).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	m, err := readManifest(cp)
	if err != nil {
		t.Fatal(err)
	}
	edit(m)
	if err := writeFileAtomic(filepath.Join(cp, manifestName), m); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestJailedCheckpointRestoreStandIn checkpoints a jailed sandbox and
// restores it under the jailer as another sandbox, whose chroot has the
// same layout: the snapshot's paths in the chroot, the jailer's command
// line for the restore, the chroot's files and owners (the state and
// memory linked and only readable by the new VMM's group, the disk a copy
// of the new uid's), the VMM's cgroup, and nothing left of either. A
// backend without the jailer refuses the checkpoint. As everywhere here,
// the stand-in's snapshot holds the guest's runc sandbox frozen rather
// than its memory.
func TestJailedCheckpointRestoreStandIn(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots stand-in guests")
	}
	record := filepath.Join(t.TempDir(), "api.jsonl")
	t.Setenv("TUPPER_FAKEFC_RECORD", record)
	b, jailerRecord := newJailedBackend(t)
	const src, dst = "jck1", "jck2"
	spec := testSpec(t, src)
	spec.Resources.CPUs = 2
	if _, err := b.Start(startCtx(t), spec); err != nil {
		t.Fatal(err)
	}
	waitAgent(t, b, src)
	checkStats(t, b, src, 256)
	guestRun(t, b, src, "echo jailed > /tmp/kept")
	since := numRecorded(t, record)
	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := b.checkpoint(t.Context(), src, dir); err != nil {
		t.Fatal(err)
	}
	want := []apiCallRecord{
		{"GET", "/", ""},
		{"PATCH", "/vm", `{"state":"Paused"}`},
		{"PUT", "/snapshot/create", `{"snapshot_type":"Full","snapshot_path":"/checkpoint.vmstate","mem_file_path":"/checkpoint.mem"}`},
	}
	if d := cmp.Diff(want, callsSince(t, record, since)); d != "" {
		t.Errorf("Checkpoint's calls (-want +got):\n%s", d)
	}
	for _, name := range snapshotFiles {
		if _, mode, uid, _ := inode(t, filepath.Join(dir, name)); mode != 0o600 || uid != uint32(os.Getuid()) {
			t.Errorf("%s: mode %o, owner %d; want the daemon's, 0600", name, mode, uid)
		}
	}
	if m, err := readManifest(dir); err != nil || !m.Jailed || m.CPUs != 2 || m.VCPUs != 2 {
		t.Errorf("manifest %+v, %v", m, err)
	}
	if err := b.Stop(t.Context(), src); err != nil {
		t.Fatal(err)
	}

	// Its paths name the chroot: a backend without the jailer refuses it.
	direct := newStandInBackend(t)
	if _, err := direct.Restore(startCtx(t), spec, dir); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "made under the jailer") {
		t.Errorf("Restore without the jailer = %v, want it refused", err)
	}

	s := *spec
	s.ID = dst
	since = numRecorded(t, record)
	if _, err := b.Restore(startCtx(t), &s, dir); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	want = []apiCallRecord{
		{"PUT", "/snapshot/load", `{"snapshot_path":"/restore.vmstate","mem_backend":{"backend_type":"File","backend_path":"/restore.mem"},"resume_vm":true}`},
	}
	if d := cmp.Diff(want, withoutWaits(t, callsSince(t, record, since))); d != "" {
		t.Errorf("Restore's calls after the wait (-want +got):\n%s", d)
	}
	argvs := jailerArgvs(t, jailerRecord)
	// The uid src held, released by its Stop, is the first free again.
	uid, gid := 990000, 990000
	if rec, err := b.readRecord(dst); err != nil || rec.UID != uid {
		t.Errorf("the restored sandbox's record: %+v, %v; want uid %d", rec, err, uid)
	}
	wantArgv := jailerArgs(jailerSpec{
		Jailer: b.jailer, Firecracker: b.firecracker, ID: dst, UID: uid, GID: gid, ChrootBase: b.chrootBase,
		CgroupVersion: b.cgroups.Version, CgroupParent: DefaultCgroupParent, Limits: vmmLimits(b.cgroups.Version, 2, 256<<20),
	})
	if d := cmp.Diff(wantArgv, argvs[len(argvs)-1]); d != "" {
		t.Errorf("the restore's jailer argv (-want +got):\n%s", d)
	}
	root := chrootRoot(b.chrootBase, b.firecracker, dst)
	for name, ckpt := range map[string]string{restoreStateName: snapStateName, restoreMemName: snapMemName} {
		ino, mode, fuid, fgid := inode(t, filepath.Join(root, name))
		if cino, _, _, _ := inode(t, filepath.Join(dir, ckpt)); ino != cino || mode != 0o640 || int(fuid) != os.Getuid() || int(fgid) != gid {
			t.Errorf("%s in the chroot: inode %d, mode %o, %d:%d; want a link to the checkpoint's %s (%d), 0640, 0:%d", name, ino, mode, fuid, fgid, ckpt, cino, gid)
		}
	}
	if _, mode, fuid, _ := inode(t, filepath.Join(root, rwDiskName)); int(fuid) != uid || mode != 0o600 {
		t.Errorf("the restored writable disk: owner %d, mode %o; want %d's, 0600", fuid, mode, uid)
	}
	if _, err := os.Stat(filepath.Join(root, kernelName)); err == nil {
		t.Error("a restore's chroot holds the kernel, which the snapshot does not need")
	}
	waitAgent(t, b, dst)
	if got := guestRun(t, b, dst, "cat /tmp/kept"); got != "jailed\n" {
		t.Errorf("the restored guest's file: %q", got)
	}
	checkStats(t, b, dst, 256)
	if err := b.Stop(t.Context(), dst); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, b, dst)
	noLeftovers(t, b, src)
	if held, _ := b.uids.holders(); len(held) != 0 {
		t.Errorf("uid leases left: %v", held)
	}
}

// jailerArgvs reads the stand-in jailer's record of its command lines.
func jailerArgvs(t *testing.T, record string) [][]string {
	t.Helper()
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var a []string
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// TestCheckpointRestoreReal checkpoints and restores a real microVM where
// the host can run Firecracker (or TUPPER_TEST_BACKEND says firecracker,
// which makes its absence a failure): the guest's memory, with a process
// in it, and its disk come back in a new VMM, and the stats are the new
// VMM's. Elsewhere it is reported as not run; the stand-in's tests above
// run the same code paths.
func TestCheckpointRestoreReal(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots microVMs")
	}
	real, why := realPlatform()
	if !real {
		if os.Getenv("TUPPER_TEST_BACKEND") == "firecracker" {
			t.Fatalf("TUPPER_TEST_BACKEND=firecracker, but this host cannot run Firecracker: %s", why)
		}
		t.Skip("NOT RUN: real Firecracker: " + why)
	}
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root for the jailer, cgroups and image disks")
	}
	b, err := New(Config{Root: t.TempDir(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopAll(t, b) })
	const id = "realckpt1"
	spec := testSpec(t, id)
	if _, err := b.Start(startCtx(t), spec); err != nil {
		t.Fatal(err)
	}
	waitAgent(t, b, id)
	pid := strings.TrimSpace(guestRun(t, b, id, "setsid sleep 600 >/dev/null 2>&1 </dev/null & echo $!; echo kept > /kept"))
	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := b.checkpoint(t.Context(), id, dir); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if err := b.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Restore(startCtx(t), spec, dir); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	waitAgent(t, b, id)
	if got := guestRun(t, b, id, "cat /kept; kill -0 "+pid+" && echo alive"); got != "kept\nalive\n" {
		t.Errorf("the guest after Restore: %q, want its file and its process", got)
	}
	checkStats(t, b, id, 256)
	if err := b.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, b, id)
}
