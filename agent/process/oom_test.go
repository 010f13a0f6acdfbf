package process

import (
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
