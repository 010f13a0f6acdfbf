package runc_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/runc"
	"github.com/lightbearco/tupper/internal/testutil"
)

// TestSocketBuffersCharged checks that on cgroup v1 a sandbox's socket
// buffers have a limit of their own, which is what makes the kernel
// charge them to the sandbox at all.
func TestSocketBuffersCharged(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a container")
	}
	dir := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(dir, "memory.kmem.tcp.limit_in_bytes")); err != nil {
		t.Skip("not cgroup v1 with TCP accounting: v2 charges socket buffers to memory.current always")
	}
	b := newBackend(t)
	id := "sockbuf-" + strings.ToLower(t.Name()[len(t.Name())-4:])
	_, err := b.Start(context.Background(), &backend.Spec{
		ID: id, RootFS: testutil.TestRootFS(t), Agent: backend.Agent{Path: testutil.AgentBinary(t)},
		Resources: backend.Resources{MemoryBytes: 256 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, runc.DefaultCgroupParent, id, "memory.kmem.tcp.limit_in_bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != "67108864" {
		t.Errorf("memory.kmem.tcp.limit_in_bytes = %s, want a quarter of the 256 MiB limit", got)
	}
}
