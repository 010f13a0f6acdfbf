package process

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
	pb "github.com/lightbearco/tupper/proto/process"
)

func TestBuildEnv(t *testing.T) {
	u := &identity.User{Name: "user", Home: "/home/user", Shell: "/bin/bash"}
	tests := []struct {
		name string
		base []string
		req  map[string]string
		pty  bool
		want []string
	}{
		{
			name: "defaults",
			want: []string{"PATH=" + defaultPath, "HOME=/home/user", "USER=user", "LOGNAME=user", "SHELL=/bin/bash"},
		},
		{
			name: "base PATH wins over the default, identity over base",
			base: []string{"PATH=/opt/bin", "HOME=/root", "LANG=C.UTF-8"},
			want: []string{"PATH=/opt/bin", "HOME=/home/user", "LANG=C.UTF-8", "USER=user", "LOGNAME=user", "SHELL=/bin/bash"},
		},
		{
			name: "request wins over everything, in key order",
			base: []string{"A=base"},
			req:  map[string]string{"Z": "z", "A": "req", "HOME": "/tmp"},
			want: []string{"PATH=" + defaultPath, "A=req", "HOME=/tmp", "USER=user", "LOGNAME=user", "SHELL=/bin/bash", "Z=z"},
		},
		{
			name: "pty gets TERM",
			pty:  true,
			want: []string{"PATH=" + defaultPath, "HOME=/home/user", "USER=user", "LOGNAME=user", "SHELL=/bin/bash", "TERM=" + defaultTerm},
		},
		{
			name: "pty keeps a TERM from the base",
			base: []string{"TERM=vt100"},
			pty:  true,
			want: []string{"PATH=" + defaultPath, "TERM=vt100", "HOME=/home/user", "USER=user", "LOGNAME=user", "SHELL=/bin/bash"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, buildEnv(tt.base, u, tt.req, tt.pty)); diff != "" {
				t.Errorf("buildEnv (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveExecutable(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	noBash := filepath.Join(dir, "bin", "bash") // as in an image without bash
	tests := []struct {
		name      string
		cmd, path string
		wantExe   string
		wantArgv0 string
		wantErr   error
	}{
		{name: "absolute", cmd: tool, wantExe: tool, wantArgv0: tool},
		{name: "through PATH", cmd: "tool", path: "/nonexistent:" + dir, wantExe: tool, wantArgv0: "tool"},
		{name: "relative to cwd", cmd: "./tool", wantExe: tool, wantArgv0: "./tool"},
		{name: "missing bash falls back to sh", cmd: noBash, wantExe: fallbackShell, wantArgv0: fallbackShell},
		{name: "missing bare bash falls back to sh", cmd: "bash", path: dir, wantExe: fallbackShell, wantArgv0: fallbackShell},
		{name: "missing", cmd: "nothing-here", path: dir, wantErr: errdefs.ErrInvalidArgument},
		{name: "not executable", cmd: filepath.Join(dir, "data"), wantErr: errdefs.ErrPermissionDenied},
		{name: "directory", cmd: dir, wantErr: errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exe, argv0, err := resolveExecutable(tt.cmd, tt.path, dir)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || exe != tt.wantExe || argv0 != tt.wantArgv0 {
				t.Fatalf("= %q, %q, %v; want %q, %q", exe, argv0, err, tt.wantExe, tt.wantArgv0)
			}
		})
	}
}

func TestEndEvent(t *testing.T) {
	ptr := func(s string) *string { return &s }
	tests := []struct {
		name string
		ws   syscall.WaitStatus // Linux encoding: exit code << 8, or the signal number
		oom  string
		want *pb.ProcessEvent_EndEvent
	}{
		{"exit 0", 0, "", &pb.ProcessEvent_EndEvent{ExitCode: 0, Exited: true, Status: "exit status 0"}},
		{"exit 3", 3 << 8, "", &pb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: "exit status 3", Error: ptr("exit status 3")}},
		{"SIGKILL", 9, "", &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: ptr("signal: killed")}},
		{"SIGSEGV core", 11 | 0x80, "", &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: segmentation fault (core dumped)", Error: ptr("signal: segmentation fault (core dumped)")}},
		{"SIGKILL for memory", 9, "the sandbox's limit is 256 MiB", &pb.ProcessEvent_EndEvent{ExitCode: 137, Status: "signal: killed", Error: ptr("signal: killed (out of memory: the sandbox's limit is 256 MiB)")}},
		{"exit 3 after a mark", 3 << 8, "the sandbox's limit is 256 MiB", &pb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: "exit status 3", Error: ptr("exit status 3")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, endEvent(tt.ws, tt.oom), protocmp.Transform()); diff != "" {
				t.Errorf("endEvent (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeepaliveInterval(t *testing.T) {
	tests := []struct {
		header string
		want   time.Duration
	}{
		{"", defaultKeepalive},
		{"1", time.Second},
		{"50", 50 * time.Second},
		{"0", defaultKeepalive},
		{"-3", defaultKeepalive},
		{"soon", defaultKeepalive},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.header), func(t *testing.T) {
			h := http.Header{}
			if tt.header != "" {
				h.Set("Keepalive-Ping-Interval", tt.header)
			}
			if got := keepaliveInterval(h); got != tt.want {
				t.Errorf("= %v, want %v", got, tt.want)
			}
		})
	}
}

func TestToConnect(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want connect.Code
	}{
		{"not found", fmt.Errorf("pid 3: %w", errdefs.ErrNotFound), connect.CodeNotFound},
		{"invalid", fmt.Errorf("cwd: %w", errdefs.ErrInvalidArgument), connect.CodeInvalidArgument},
		{"precondition", fmt.Errorf("x: %w", errdefs.ErrFailedPrecondition), connect.CodeFailedPrecondition},
		{"unauthenticated", fmt.Errorf("x: %w", errdefs.ErrUnauthenticated), connect.CodeUnauthenticated},
		{"permission", fmt.Errorf("x: %w", errdefs.ErrPermissionDenied), connect.CodePermissionDenied},
		{"exhausted", fmt.Errorf("x: %w", errdefs.ErrResourceExhausted), connect.CodeResourceExhausted},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), connect.CodeDeadlineExceeded},
		{"canceled", context.Canceled, connect.CodeCanceled},
		{"connect error passes", connect.NewError(connect.CodeAborted, errors.New("x")), connect.CodeAborted},
		{"unclassified", errors.New("boom"), connect.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := connect.CodeOf(toConnect(tt.err)); got != tt.want {
				t.Errorf("code = %v, want %v", got, tt.want)
			}
		})
	}
	if toConnect(nil) != nil {
		t.Error("toConnect(nil) != nil")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"zero", Config{}, false},
		{"bad user", Config{DefaultUser: "a:b"}, true},
		{"bad env", Config{Env: []string{"NOEQUALS"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (tt.cfg.DefaultUser != identity.DefaultUser || tt.cfg.Logger == nil) {
				t.Errorf("defaults not filled: %+v", tt.cfg)
			}
		})
	}
}
