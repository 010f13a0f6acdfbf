package process

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/internal/testutil"
	pb "github.com/lightbearco/tupper/proto/process"
	"github.com/lightbearco/tupper/proto/process/processconnect"
)

// ownModeEnv marks a re-executed test binary that must keep the reaper in
// mode own (see TestReaperOwnMode).
const ownModeEnv = "TUPPER_PROCESS_TEST_OWN_MODE"

func TestMain(m *testing.M) {
	// The tests run `bash -l` as the SDKs do; the host's startup files
	// must not slow or change them.
	if code, parent := testutil.HermeticLoginShells(); parent {
		os.Exit(code)
	}
	if os.Getenv(ownModeEnv) == "" {
		// Orphans of the test commands come back to the test binary as
		// they come back to the agent as PID 1, and the reaper runs in
		// the mode that collects them.
		if err := Supervise(slog.New(slog.DiscardHandler)); err != nil {
			fmt.Fprintln(os.Stderr, "supervise:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// codecs are the two encodings clients use: the SDKs send JSON.
var codecs = []struct {
	name string
	opts []connect.ClientOption
}{
	{"binary", nil},
	{"json", []connect.ClientOption{connect.WithProtoJSON()}},
}

type testEnv struct {
	svc    *Service
	srv    *httptest.Server
	client processconnect.ProcessClient
}

// newTestEnv serves a Service over plain HTTP/1.1, as the SDKs reach the
// agent, and kills whatever the test left running when it ends.
func newTestEnv(t *testing.T, opts ...connect.ClientOption) *testEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root: commands run as other users through setuid")
	}
	svc, err := New(Config{
		DefaultUser: "root",
		Env:         []string{"TUPPER_BASE=base", "PATH=/usr/local/bin:/usr/bin:/bin"},
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	path, h := processconnect.NewProcessHandler(svc)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		for _, h := range svc.running() {
			_ = h.signal(syscall.SIGKILL)
		}
		srv.Close()
	})
	return &testEnv{svc: svc, srv: srv, client: processconnect.NewProcessClient(srv.Client(), srv.URL, opts...)}
}

func shReq(script string) *pb.StartRequest {
	return &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}}
}

// request wraps msg as user ("" for the service's default user).
func request[T any](msg *T, user string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	if user != "" {
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	return req
}

func pidSel(pid uint32) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
}

func tagSel(tag string) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}
}

type eventMsg interface{ GetEvent() *pb.ProcessEvent }

type eventStream[T eventMsg] interface {
	Receive() bool
	Msg() T
	Err() error
}

// follower reads a Start or Connect stream on its own goroutine.
type follower struct {
	events chan *pb.ProcessEvent
	err    error // set before events is closed
}

func followStream[T eventMsg](s eventStream[T]) *follower {
	f := &follower{events: make(chan *pb.ProcessEvent, 1024)}
	go func() {
		for s.Receive() {
			f.events <- s.Msg().GetEvent()
		}
		f.err = s.Err()
		close(f.events)
	}()
	return f
}

// next returns the next event, or nil when the stream ended.
func (f *follower) next(t *testing.T) *pb.ProcessEvent {
	t.Helper()
	select {
	case ev := <-f.events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return nil
	}
}

func (f *follower) expectStart(t *testing.T) uint32 {
	t.Helper()
	ev := f.next(t)
	if ev.GetStart() == nil {
		t.Fatalf("first event = %v (stream err %v), want start", ev, f.err)
	}
	return ev.GetStart().GetPid()
}

// waitOutput reads data events until their pty or stdout bytes contain want.
func (f *follower) waitOutput(t *testing.T, out *bytes.Buffer, want string) {
	t.Helper()
	for !strings.Contains(out.String(), want) {
		ev := f.next(t)
		if ev == nil {
			t.Fatalf("stream ended (err %v) before output %q; got %q", f.err, want, out.String())
		}
		if d := ev.GetData(); d != nil {
			out.Write(d.GetPty())
			out.Write(d.GetStdout())
		}
	}
}

// outcome is everything a stream delivered.
type outcome struct {
	pid            uint32
	stdout, stderr bytes.Buffer
	pty            bytes.Buffer
	end            *pb.ProcessEvent_EndEvent
	keepalives     []time.Time
	err            error
}

// rest reads the stream to its close, checking that the end event comes
// last.
func (f *follower) rest(t *testing.T, o *outcome) *outcome {
	t.Helper()
	for ev := f.next(t); ev != nil; ev = f.next(t) {
		if o.end != nil {
			t.Fatalf("event %v after the end", ev)
		}
		switch {
		case ev.GetData() != nil:
			o.stdout.Write(ev.GetData().GetStdout())
			o.stderr.Write(ev.GetData().GetStderr())
			o.pty.Write(ev.GetData().GetPty())
		case ev.GetEnd() != nil:
			o.end = ev.GetEnd()
		case ev.GetKeepalive() != nil:
			o.keepalives = append(o.keepalives, time.Now())
		case ev.GetStart() != nil:
			t.Fatalf("second start event %v", ev)
		}
	}
	o.err = f.err
	return o
}

// run starts req and reads its stream to the end.
func (e *testEnv) run(t *testing.T, ctx context.Context, req *connect.Request[pb.StartRequest]) *outcome {
	t.Helper()
	stream, err := e.client.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	f := followStream(stream)
	ev := f.next(t)
	if ev == nil {
		return &outcome{err: f.err}
	}
	if ev.GetStart() == nil {
		t.Fatalf("first event = %v, want start", ev)
	}
	return f.rest(t, &outcome{pid: ev.GetStart().GetPid()})
}

// waitGone waits until pid no longer exists (or is at most a zombie
// when allowZombie).
func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	t.Fatalf("pid %d still exists after %v: %s", pid, within, stat)
}
