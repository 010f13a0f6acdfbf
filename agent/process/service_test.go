package process

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/lightbearco/tupper/errdefs"
	pb "github.com/lightbearco/tupper/proto/process"
)

func ptr[T any](v T) *T { return &v }

func TestStart(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name       string
		req        *pb.StartRequest
		user       string
		wantStdout string
		wantStderr string
		wantEnd    *pb.ProcessEvent_EndEvent
	}{
		{
			name:       "echo through bash like the SDK",
			req:        &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo hello"}}},
			wantStdout: "hello\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{ExitCode: 0, Exited: true, Status: "exit status 0"},
		},
		{
			name:    "exit 3",
			req:     shReq("exit 3"),
			wantEnd: &pb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: "exit status 3", Error: ptr("exit status 3")},
		},
		{
			name:    "exit 255",
			req:     shReq("exit 255"),
			wantEnd: &pb.ProcessEvent_EndEvent{ExitCode: 255, Exited: true, Status: "exit status 255", Error: ptr("exit status 255")},
		},
		{
			name:       "stderr",
			req:        shReq("echo out; echo err >&2"),
			wantStdout: "out\n",
			wantStderr: "err\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"},
		},
		{
			name: "env layers",
			req: &pb.StartRequest{Process: &pb.ProcessConfig{
				Cmd:  "/bin/sh",
				Args: []string{"-c", `echo "$TUPPER_BASE $MINE $HOME $USER $LOGNAME $SHELL $TERM"`},
				Envs: map[string]string{"MINE": "mine"},
			}},
			wantStdout: "base mine /root root root /bin/bash \n",
			wantEnd:    &pb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"},
		},
		{
			name: "request env overrides base",
			req: &pb.StartRequest{Process: &pb.ProcessConfig{
				Cmd: "/bin/sh", Args: []string{"-c", "echo $TUPPER_BASE"}, Envs: map[string]string{"TUPPER_BASE": "over"},
			}},
			wantStdout: "over\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"},
		},
		{
			name:       "cwd",
			req:        &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "pwd", Cwd: &dir}},
			wantStdout: dir + "\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"},
		},
		{
			name:       "default cwd is home",
			req:        &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "pwd"}},
			wantStdout: "/root\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"},
		},
		{
			name:       "relative cwd resolves against home",
			req:        &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "pwd", Cwd: ptr(".")}},
			wantStdout: "/root\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"},
		},
		{
			name:       "user root",
			req:        shReq("id -u; id -g"),
			user:       "root",
			wantStdout: "0\n0\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"},
		},
		{
			name:       "user nobody drops root's groups",
			req:        &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "id -u; id -G; echo $HOME $USER; pwd"}}},
			user:       "nobody",
			wantStdout: "65534\n65534\n/nonexistent nobody\n/\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"},
		},
		{
			name:       "stdin false reads end-of-file",
			req:        &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "cat; echo done"}}, Stdin: ptr(false)},
			wantStdout: "done\n",
			wantEnd:    &pb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"},
		},
		{
			name:    "killed by a signal",
			req:     shReq("kill -KILL $$"),
			wantEnd: &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: ptr("signal: killed")},
		},
	}
	for _, codec := range codecs {
		t.Run(codec.name, func(t *testing.T) {
			t.Parallel()
			e := newTestEnv(t, codec.opts...)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					o := e.run(t, t.Context(), request(tt.req, tt.user))
					if o.err != nil {
						t.Fatalf("stream error: %v", o.err)
					}
					if o.pid == 0 {
						t.Error("start event has pid 0")
					}
					if got := o.stdout.String(); got != tt.wantStdout {
						t.Errorf("stdout = %q, want %q", got, tt.wantStdout)
					}
					if got := o.stderr.String(); got != tt.wantStderr {
						t.Errorf("stderr = %q, want %q", got, tt.wantStderr)
					}
					if diff := cmp.Diff(tt.wantEnd, o.end, protocmp.Transform()); diff != "" {
						t.Errorf("end event (-want +got):\n%s", diff)
					}
				})
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		name string
		req  *pb.StartRequest
		user string
		want connect.Code
	}{
		{"missing cwd", &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "pwd", Cwd: ptr("/does/not/exist")}}, "", connect.CodeInvalidArgument},
		{"cwd is a file", &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "pwd", Cwd: ptr("/etc/passwd")}}, "", connect.CodeInvalidArgument},
		{"missing executable", &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "no-such-command-here"}}, "", connect.CodeInvalidArgument},
		{"empty cmd", &pb.StartRequest{Process: &pb.ProcessConfig{}}, "", connect.CodeInvalidArgument},
		{"unknown user", shReq("true"), "no-such-user-xyz", connect.CodeUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := e.run(t, t.Context(), request(tt.req, tt.user))
			if got := connect.CodeOf(o.err); got != tt.want {
				t.Fatalf("code = %v (%v), want %v", got, o.err, tt.want)
			}
		})
	}
}

func TestStdinSendAndClose(t *testing.T) {
	for _, codec := range codecs {
		t.Run(codec.name, func(t *testing.T) {
			e := newTestEnv(t, codec.opts...)
			stream, err := e.client.Start(t.Context(), request(shReq("cat; echo eof"), ""))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			f := followStream(stream)
			pid := f.expectStart(t)
			var out bytes.Buffer
			for _, line := range []string{"one\n", "two\n"} {
				in := &pb.SendInputRequest{Process: pidSel(pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(line)}}}
				if _, err := e.client.SendInput(t.Context(), request(in, "")); err != nil {
					t.Fatal(err)
				}
				f.waitOutput(t, &out, line)
			}
			if _, err := e.client.CloseStdin(t.Context(), request(&pb.CloseStdinRequest{Process: pidSel(pid)}, "")); err != nil {
				t.Fatal(err)
			}
			o := f.rest(t, &outcome{})
			out.Write(o.stdout.Bytes())
			if got, want := out.String(), "one\ntwo\neof\n"; got != want {
				t.Errorf("stdout = %q, want %q", got, want)
			}
			if o.end.GetExitCode() != 0 || o.err != nil {
				t.Errorf("end = %v, err %v", o.end, o.err)
			}
		})
	}
}

func TestStreamInput(t *testing.T) {
	e := newTestEnv(t)
	stream, err := e.client.Start(t.Context(), request(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}, Tag: ptr("si")}, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	f := followStream(stream)
	pid := f.expectStart(t)

	in := e.client.StreamInput(t.Context())
	msgs := []*pb.StreamInputRequest{
		{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: tagSel("si")}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("abc")}}}}},
		{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("def\n")}}}}},
	}
	for _, m := range msgs {
		if err := in.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	f.waitOutput(t, &out, "abcdef\n")
	if _, err := e.client.CloseStdin(t.Context(), request(&pb.CloseStdinRequest{Process: pidSel(pid)}, "")); err != nil {
		t.Fatal(err)
	}
	if o := f.rest(t, &outcome{}); o.end == nil || o.err != nil {
		t.Fatalf("end = %v, err %v", o.end, o.err)
	}

	t.Run("data before start", func(t *testing.T) {
		in := e.client.StreamInput(t.Context())
		_ = in.Send(msgs[1])
		if _, err := in.CloseAndReceive(); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("err = %v, want invalid_argument", err)
		}
	})
}

func TestLargeOutputIntact(t *testing.T) {
	old := slowSubscriberTimeout
	slowSubscriberTimeout = 300 * time.Millisecond
	t.Cleanup(func() { slowSubscriberTimeout = old })

	data := make([]byte, 10<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	for _, codec := range codecs {
		t.Run(codec.name, func(t *testing.T) {
			e := newTestEnv(t, codec.opts...)
			stream, err := e.client.Start(t.Context(), request(shReq("read go; exec cat "+file), ""))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			f := followStream(stream)
			pid := f.expectStart(t)
			// A second follower that never reads must neither stall the
			// Start stream for good nor make it lose anything.
			h, err := e.svc.lookup(pidSel(pid))
			if err != nil {
				t.Fatal(err)
			}
			stalled := newSubscriber(false)
			h.subscribe(stalled)
			in := &pb.SendInputRequest{Process: pidSel(pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("\n")}}}
			if _, err := e.client.SendInput(t.Context(), request(in, "")); err != nil {
				t.Fatal(err)
			}
			o := f.rest(t, &outcome{})
			if o.err != nil || o.end.GetExitCode() != 0 {
				t.Fatalf("end = %v, err %v", o.end, o.err)
			}
			if got := sha256.Sum256(o.stdout.Bytes()); got != want {
				t.Fatalf("stdout: %d bytes, sha256 %x; want %d bytes, %x", o.stdout.Len(), got, len(data), want)
			}
			select {
			case <-stalled.dropped:
			default:
				t.Error("the stalled follower was not dropped")
			}
		})
	}
}

func TestReattach(t *testing.T) {
	for _, sel := range []struct {
		name string
		sel  func(pid uint32) *pb.ProcessSelector
	}{
		{"by pid", pidSel},
		{"by tag", func(uint32) *pb.ProcessSelector { return tagSel("server") }},
	} {
		t.Run(sel.name, func(t *testing.T) {
			e := newTestEnv(t, connect.WithProtoJSON())
			ctx, cancel := context.WithCancel(t.Context())
			stream, err := e.client.Start(ctx, request(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "read x; echo got $x; read y; echo got $y"}}, Tag: ptr("server")}, ""))
			if err != nil {
				t.Fatal(err)
			}
			pid := followStream(stream).expectStart(t)
			// The client goes away: the process must stay.
			cancel()
			stream.Close()
			time.Sleep(100 * time.Millisecond)

			c1, err := e.client.Connect(t.Context(), request(&pb.ConnectRequest{Process: sel.sel(pid)}, ""))
			if err != nil {
				t.Fatal(err)
			}
			defer c1.Close()
			f1 := followStream(c1)
			if got := f1.expectStart(t); got != pid {
				t.Fatalf("connect start pid = %d, want %d", got, pid)
			}
			send := func(s string) {
				in := &pb.SendInputRequest{Process: sel.sel(pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(s)}}}
				if _, err := e.client.SendInput(t.Context(), request(in, "")); err != nil {
					t.Fatal(err)
				}
			}
			send("one\n")
			var out1 bytes.Buffer
			f1.waitOutput(t, &out1, "got one\n")

			// A second follower joins and sees what comes from now on.
			c2, err := e.client.Connect(t.Context(), request(&pb.ConnectRequest{Process: sel.sel(pid)}, ""))
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			f2 := followStream(c2)
			f2.expectStart(t)
			time.Sleep(50 * time.Millisecond) // let c2 subscribe before the output
			send("two\n")
			for i, f := range []*follower{f1, f2} {
				o := f.rest(t, &outcome{})
				if !strings.Contains(o.stdout.String(), "got two\n") || o.end.GetExitCode() != 0 || o.err != nil {
					t.Errorf("follower %d: stdout %q, end %v, err %v", i+1, o.stdout.String(), o.end, o.err)
				}
			}
		})
	}
}

func TestSendSignal(t *testing.T) {
	tests := []struct {
		name   string
		signal pb.Signal
		want   string
	}{
		{"SIGKILL", pb.Signal_SIGNAL_SIGKILL, "signal: killed"},
		{"SIGTERM", pb.Signal_SIGNAL_SIGTERM, "signal: terminated"},
	}
	e := newTestEnv(t, connect.WithProtoJSON())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The child sleep is in the same group and dies too: it holds
			// stdout, so the end would otherwise wait for the grace period
			// only; its pid is checked below.
			stream, err := e.client.Start(t.Context(), request(shReq("sleep 30 & echo $!; wait"), ""))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			f := followStream(stream)
			pid := f.expectStart(t)
			var out bytes.Buffer
			f.waitOutput(t, &out, "\n")
			child, _ := strconv.Atoi(strings.TrimSpace(out.String()))
			if _, err := e.client.SendSignal(t.Context(), request(&pb.SendSignalRequest{Process: pidSel(pid), Signal: tt.signal}, "")); err != nil {
				t.Fatal(err)
			}
			o := f.rest(t, &outcome{})
			if o.err != nil || o.end.GetStatus() != tt.want || o.end.GetExited() {
				t.Fatalf("end = %v, err %v; want status %q", o.end, o.err, tt.want)
			}
			// Once the end event is out, the process is gone: a second
			// signal finds nothing, at once.
			_, err = e.client.SendSignal(t.Context(), request(&pb.SendSignalRequest{Process: pidSel(pid), Signal: tt.signal}, ""))
			if connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("a signal after the end event: %v, want not_found", err)
			}
			waitGone(t, child, 3*time.Second)
		})
	}
}

func TestUnknownProcess(t *testing.T) {
	e := newTestEnv(t)
	ctx := t.Context()
	const pid = 1<<22 + 7 // above pid_max's default
	calls := []struct {
		name string
		call func() error
	}{
		{"SendSignal pid", func() error {
			_, err := e.client.SendSignal(ctx, request(&pb.SendSignalRequest{Process: pidSel(pid), Signal: pb.Signal_SIGNAL_SIGKILL}, ""))
			return err
		}},
		{"SendInput tag", func() error {
			_, err := e.client.SendInput(ctx, request(&pb.SendInputRequest{Process: tagSel("nope"), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}}, ""))
			return err
		}},
		{"CloseStdin pid", func() error {
			_, err := e.client.CloseStdin(ctx, request(&pb.CloseStdinRequest{Process: pidSel(pid)}, ""))
			return err
		}},
		{"Update pid", func() error {
			_, err := e.client.Update(ctx, request(&pb.UpdateRequest{Process: pidSel(pid)}, ""))
			return err
		}},
		{"Connect tag", func() error {
			s, err := e.client.Connect(ctx, request(&pb.ConnectRequest{Process: tagSel("nope")}, ""))
			if err != nil {
				return err
			}
			defer s.Close()
			for s.Receive() {
			}
			return s.Err()
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("err = %v, want not_found", err)
			}
		})
	}
}

func TestPTY(t *testing.T) {
	e := newTestEnv(t, connect.WithProtoJSON())
	start := func(t *testing.T, script string) (uint32, *follower) {
		req := &pb.StartRequest{
			Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}},
			Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 30}},
		}
		stream, err := e.client.Start(t.Context(), request(req, ""))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stream.Close() })
		f := followStream(stream)
		return f.expectStart(t), f
	}
	sendPTY := func(t *testing.T, pid uint32, s string) {
		in := &pb.SendInputRequest{Process: pidSel(pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(s)}}}
		if _, err := e.client.SendInput(t.Context(), request(in, "")); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("size, tty and TERM", func(t *testing.T) {
		t.Parallel()
		_, f := start(t, "stty size; test -t 0 && test -t 1 && echo tty; echo $TERM")
		o := f.rest(t, &outcome{})
		if got, want := o.pty.String(), "30 100\r\ntty\r\nxterm-256color\r\n"; got != want {
			t.Errorf("pty output = %q, want %q", got, want)
		}
		if o.stdout.Len()+o.stderr.Len() != 0 {
			t.Errorf("pty process sent stdout/stderr events: %q %q", o.stdout.String(), o.stderr.String())
		}
	})
	t.Run("input echo", func(t *testing.T) {
		t.Parallel()
		pid, f := start(t, "read line; echo got $line")
		sendPTY(t, pid, "hello\n")
		o := f.rest(t, &outcome{})
		// The terminal echoes the input, then the shell answers.
		if got, want := o.pty.String(), "hello\r\ngot hello\r\n"; got != want {
			t.Errorf("pty output = %q, want %q", got, want)
		}
	})
	t.Run("resize", func(t *testing.T) {
		t.Parallel()
		pid, f := start(t, "stty size; read x; stty size")
		var out bytes.Buffer
		f.waitOutput(t, &out, "30 100\r\n")
		if _, err := e.client.Update(t.Context(), request(&pb.UpdateRequest{Process: pidSel(pid), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 120, Rows: 50}}}, "")); err != nil {
			t.Fatal(err)
		}
		sendPTY(t, pid, "\n")
		f.waitOutput(t, &out, "50 120\r\n")
		f.rest(t, &outcome{})
	})
	t.Run("stdin input is refused", func(t *testing.T) {
		t.Parallel()
		pid, f := start(t, "read x")
		in := &pb.SendInputRequest{Process: pidSel(pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x\n")}}}
		if _, err := e.client.SendInput(t.Context(), request(in, "")); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("stdin input to a pty process: err %v, want failed_precondition", err)
		}
		sendPTY(t, pid, "\x04")
		f.rest(t, &outcome{})
	})
}

func TestKeepalive(t *testing.T) {
	e := newTestEnv(t, connect.WithProtoJSON())
	req := request(shReq("sleep 2.6"), "")
	req.Header().Set("Keepalive-Ping-Interval", "1")
	began := time.Now()
	o := e.run(t, t.Context(), req)
	if o.err != nil || o.end == nil {
		t.Fatalf("end %v, err %v", o.end, o.err)
	}
	if len(o.keepalives) != 2 {
		t.Fatalf("got %d keepalives in %v, want 2", len(o.keepalives), time.Since(began))
	}
	for i, at := range o.keepalives {
		if d := at.Sub(began); d < time.Duration(i+1)*time.Second-100*time.Millisecond || d > time.Duration(i+1)*time.Second+500*time.Millisecond {
			t.Errorf("keepalive %d after %v, want ~%ds", i+1, d, i+1)
		}
	}
}

func TestStartDeadline(t *testing.T) {
	e := newTestEnv(t)
	t.Run("deadline kills the process group", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
		defer cancel()
		stream, err := e.client.Start(ctx, request(shReq("sleep 30 & echo $!; wait"), ""))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		f := followStream(stream)
		pid := f.expectStart(t)
		var out bytes.Buffer
		f.waitOutput(t, &out, "\n")
		child, _ := strconv.Atoi(strings.TrimSpace(out.String()))
		o := f.rest(t, &outcome{})
		if connect.CodeOf(o.err) != connect.CodeDeadlineExceeded {
			t.Errorf("stream err = %v, want deadline_exceeded", o.err)
		}
		waitGone(t, int(pid), 3*time.Second)
		waitGone(t, child, 3*time.Second)
	})
	t.Run("disconnect leaves the process running", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		stream, err := e.client.Start(ctx, request(shReq("sleep 30"), ""))
		if err != nil {
			t.Fatal(err)
		}
		pid := followStream(stream).expectStart(t)
		cancel()
		stream.Close()
		time.Sleep(300 * time.Millisecond)
		if err := syscall.Kill(int(pid), 0); err != nil {
			t.Fatalf("process %d gone after its client left: %v", pid, err)
		}
		if _, err := e.client.SendSignal(t.Context(), request(&pb.SendSignalRequest{Process: pidSel(pid), Signal: pb.Signal_SIGNAL_SIGKILL}, "")); err != nil {
			t.Fatal(err)
		}
		waitGone(t, int(pid), 3*time.Second)
	})
}

func TestList(t *testing.T) {
	e := newTestEnv(t, connect.WithProtoJSON())
	var want []*pb.ProcessInfo
	for _, tag := range []string{"alpha", "beta"} {
		req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"30"}, Envs: map[string]string{"K": tag}}, Tag: ptr(tag)}
		stream, err := e.client.Start(t.Context(), request(req, ""))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		pid := followStream(stream).expectStart(t)
		want = append(want, &pb.ProcessInfo{Config: req.Process, Pid: pid, Tag: req.Tag})
	}
	res, err := e.client.List(t.Context(), request(&pb.ListRequest{}, ""))
	if err != nil {
		t.Fatal(err)
	}
	sortByPid := protocmp.SortRepeated(func(a, b *pb.ProcessInfo) bool { return a.GetPid() < b.GetPid() })
	if diff := cmp.Diff(want, res.Msg.GetProcesses(), protocmp.Transform(), sortByPid); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

// TestOrphansAreReaped starts a shell that leaves a background child
// behind. The child outlives the shell, is re-parented to the test binary
// (a subreaper, as the agent is PID 1) and must be reaped when it exits,
// not left a zombie. The shell's end must not wait for the child either,
// although the child holds its stdout.
func TestOrphansAreReaped(t *testing.T) {
	e := newTestEnv(t)
	began := time.Now()
	o := e.run(t, t.Context(), request(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "sleep 1 & echo $!"}}}, ""))
	if o.err != nil || o.end.GetExitCode() != 0 {
		t.Fatalf("end %v, err %v", o.end, o.err)
	}
	if d := time.Since(began); d > 800*time.Millisecond {
		t.Errorf("end came after %v: it waited for the background child", d)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(o.stdout.String()))
	if err != nil {
		t.Fatalf("stdout %q: %v", o.stdout.String(), err)
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", orphan)); err == nil {
		// Fields after the command name: state, ppid.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if ppid, _ := strconv.Atoi(fields[1]); ppid != os.Getpid() {
			t.Fatalf("orphan %d has parent %d, want the test binary %d", orphan, ppid, os.Getpid())
		}
	}
	waitGone(t, orphan, 5*time.Second)
}

// TestReaperOwnMode runs the test binary again, through the service, as an
// ordinary process that is no subreaper, where the reaper waits only for
// its own children; TestOwnModeHelper then runs there.
func TestReaperOwnMode(t *testing.T) {
	if os.Getenv(ownModeEnv) != "" {
		t.Skip("already the helper")
	}
	e := newTestEnv(t)
	req := &pb.StartRequest{Process: &pb.ProcessConfig{
		Cmd:  os.Args[0],
		Args: []string{"-test.run=^TestOwnModeHelper$", "-test.v", "-test.count=1"},
		Envs: map[string]string{ownModeEnv: "1"},
	}}
	o := e.run(t, t.Context(), request(req, ""))
	if o.err != nil || o.end.GetExitCode() != 0 || !strings.Contains(o.stdout.String(), "--- PASS: TestOwnModeHelper") {
		t.Fatalf("helper: end %v, err %v\nstdout:\n%s\nstderr:\n%s", o.end, o.err, o.stdout.String(), o.stderr.String())
	}
}

func TestOwnModeHelper(t *testing.T) {
	if os.Getenv(ownModeEnv) == "" {
		t.Skip("runs only inside TestReaperOwnMode")
	}
	if isSubreaper() {
		t.Fatal("helper is a subreaper")
	}
	e := newTestEnv(t)
	for i := range 3 {
		o := e.run(t, t.Context(), request(shReq(fmt.Sprintf("echo %d; exit %d", i, i)), ""))
		if o.stdout.String() != fmt.Sprintf("%d\n", i) || o.end.GetExitCode() != int32(i) {
			t.Fatalf("run %d: stdout %q end %v err %v", i, o.stdout.String(), o.end, o.err)
		}
	}
	if getReaper(nil).all {
		t.Fatal("reaper in mode all outside PID 1 and without subreaper")
	}
}

func TestSlowFollowerIsDropped(t *testing.T) {
	old := slowSubscriberTimeout
	slowSubscriberTimeout = 200 * time.Millisecond
	t.Cleanup(func() { slowSubscriberTimeout = old })

	h := newHandle(&pb.StartRequest{}, slog.New(slog.DiscardHandler))
	lossless, lossy := newSubscriber(true), newSubscriber(false)
	h.subscribe(lossless)
	h.subscribe(lossy)
	const n = 3 * subscriberQueue
	got := make(chan int)
	go func() {
		count := 0
		for range n {
			<-lossless.ch
			count++
			time.Sleep(2 * time.Millisecond) // a slow but live client
		}
		got <- count
	}()
	for i := range n {
		h.broadcast(dataEvent(outStdout, []byte{byte(i)}))
	}
	if c := <-got; c != n {
		t.Fatalf("lossless follower got %d events, want %d", c, n)
	}
	select {
	case <-lossy.dropped:
	default:
		t.Fatal("the follower that never read was not dropped")
	}
	if err := follow(t.Context(), h, lossy, time.Hour, func(*pb.ProcessEvent) error { return nil }); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("follow of a dropped follower: %v", err)
	}
}
