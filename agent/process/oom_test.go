package process

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/lightbearco/tupper/proto/process"
)

// A process the out-of-memory killer marks and kills ends with exit code
// 137 and an error that says why; a kill whose mark was taken back, or a
// plain SIGKILL, keeps envd's -1.
func TestOutOfMemoryEnd(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		name string
		mark bool
		undo bool
		want *pb.ProcessEvent_EndEvent
	}{
		{
			name: "marked",
			mark: true,
			want: &pb.ProcessEvent_EndEvent{ExitCode: 137, Status: "signal: killed", Error: ptr("signal: killed (out of memory: test limit)")},
		},
		{
			name: "mark taken back",
			mark: true, undo: true,
			want: &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: ptr("signal: killed")},
		},
		{
			name: "not marked",
			want: &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: ptr("signal: killed")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := e.client.Start(t.Context(), request(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}}, ""))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			f := followStream(stream)
			pid := int(f.expectStart(t))
			if tt.mark {
				undo := MarkOutOfMemory(pid, "test limit")
				if tt.undo {
					undo()
				}
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			o := f.rest(t, &outcome{})
			if o.err != nil {
				t.Fatal(o.err)
			}
			if diff := cmp.Diff(tt.want, o.end, protocmp.Transform()); diff != "" {
				t.Errorf("end event (-want +got):\n%s", diff)
			}
		})
	}
	// The marks went with their processes.
	oomMu.Lock()
	defer oomMu.Unlock()
	if len(oomMarks) != 0 {
		t.Errorf("marks left: %v", oomMarks)
	}
}

// TestKernelOOMCharge checks how a SIGKILL is told to be the kernel's OOM
// kill in a sandbox whose memory limit the host kernel holds: each kill
// the cgroup counts is charged to one SIGKILLed process, and no more.
func TestKernelOOMCharge(t *testing.T) {
	for _, layout := range []struct{ name, events, limit string }{
		{"cgroup v2", "memory.events", "memory.max"},
		{"cgroup v1", "memory/memory.oom_control", "memory/memory.limit_in_bytes"},
	} {
		t.Run(layout.name, func(t *testing.T) {
			root := t.TempDir()
			c := &oomCounter{root: root}
			write := func(name, body string) {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write(layout.limit, "268435456\n")
			write(layout.events, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
			if got := c.take(); got != "" {
				t.Fatalf("no kill counted: take() = %q, want \"\"", got)
			}
			write(layout.events, "oom 1\noom_kill 1\n")
			if got := c.take(); !strings.Contains(got, "256 MiB") {
				t.Fatalf("one kill counted: take() = %q, want the 256 MiB limit", got)
			}
			if got := c.take(); got != "" {
				t.Fatalf("the one kill was charged already: take() = %q", got)
			}
			write(layout.events, "oom_kill 3\n")
			if c.take() == "" || c.take() == "" || c.take() != "" {
				t.Fatal("two more kills must be charged to two processes, and no third")
			}
		})
	}
	if got := (&oomCounter{root: t.TempDir()}).take(); got != "" {
		t.Fatalf("without a memory cgroup: take() = %q, want \"\"", got)
	}
	// Kills counted before the agent started are not its processes'.
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "memory.events"), []byte("oom_kill 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &oomCounter{root: root}
	c.prime()
	if got := c.take(); got != "" {
		t.Fatalf("after priming at 5 kills: take() = %q, want \"\"", got)
	}
}
