package startcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/process"
	"github.com/lightbearco/tupper/internal/testutil"
	pb "github.com/lightbearco/tupper/proto/process"
)

func TestMain(m *testing.M) {
	// The commands run with bash -l, as in a sandbox: the host's startup
	// files must not change them.
	if code, parent := testutil.HermeticLoginShells(); parent {
		os.Exit(code)
	}
	// The test binary stands in for the agent, which reaps every child.
	if err := process.Supervise(slog.New(slog.DiscardHandler)); err != nil {
		fmt.Fprintln(os.Stderr, "supervise:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// syncBuffer is a log destination safe for the runner's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type fixture struct {
	procs *process.Service
	log   *syncBuffer
}

// newFixture is a process service as the agent has one (commands run as
// root unless told otherwise, with the sandbox's variable TUPPER_SANDBOX_VAR),
// whose processes are killed when the test ends.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	testutil.RequiresRoot(t)
	procs, err := process.New(process.Config{
		DefaultUser: "root",
		Env:         []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDBOX_VAR=from-the-sandbox"},
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{procs: procs, log: &syncBuffer{}}
	t.Cleanup(func() {
		for _, p := range f.list(t) {
			sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: p.GetPid()}}
			f.procs.SendSignal(context.Background(), connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGKILL}))
		}
	})
	return f
}

func (f *fixture) start(t *testing.T, cfg Config) *Runner {
	t.Helper()
	cfg.Procs = f.procs
	cfg.Logger = slog.New(slog.NewTextHandler(f.log, nil))
	r, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) list(t *testing.T) []*pb.ProcessInfo {
	t.Helper()
	res, err := f.procs.List(context.Background(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetProcesses()
}

// health asks r's /health, in front of a stand-in for the agent's own
// that answers 204, and returns the status and the decoded body.
func health(t *testing.T, r *Runner) (int, healthBody) {
	t.Helper()
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	rec := httptest.NewRecorder()
	r.Health(next).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
	var body healthBody
	if rec.Code != http.StatusNoContent {
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("/health answered %d with %q: %v", rec.Code, rec.Body.String(), err)
		}
		if body.Code != rec.Code {
			t.Errorf("/health's body says code %d, its status %d", body.Code, rec.Code)
		}
	}
	return rec.Code, body
}

// waitHealth waits until /health answers code, and returns its body.
func waitHealth(t *testing.T, r *Runner, code int) healthBody {
	t.Helper()
	var last healthBody
	testutil.WaitFor(t, 20*time.Second, fmt.Sprintf("/health to answer %d", code), func() bool {
		got, body := health(t, r)
		last = body
		return got == code
	})
	return last
}

// openDir is a directory every user may write to, for commands that run
// as nobody (t.TempDir's parents are root's alone).
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "startcmd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestReadyFlips: the start command runs as a listed process tagged
// start-cmd, as the template's user, in its directory, with the sandbox's
// environment; /health answers 503 naming the check while the check
// fails and 204 once it passes; the command's output reaches the log
// line by line.
func TestReadyFlips(t *testing.T) {
	f := newFixture(t)
	dir := openDir(t)
	start := `echo "starting as $(id -un) in $PWD with $SANDBOX_VAR"; while [ ! -e go ]; do sleep 0.05; done; echo listening >&2; touch ready; exec sleep 600`
	r := f.start(t, Config{Cmd: start, Ready: "[ -e ready ]", User: "nobody", Dir: dir, Interval: 20 * time.Millisecond})

	code, body := health(t, r)
	if code != http.StatusServiceUnavailable || body.State != "waiting" || !strings.Contains(body.Message, `"[ -e ready ]"`) {
		t.Fatalf("/health before the check passes: %d %+v, want 503 naming the check", code, body)
	}
	procs := f.list(t)
	if len(procs) != 1 || procs[0].GetTag() != Tag || !slices.Contains(procs[0].GetConfig().GetArgs(), start) {
		t.Fatalf("listed processes %v, want the start command tagged %q", procs, Tag)
	}
	if pid := procs[0].GetPid(); pid != r.Status().Pid {
		t.Errorf("listed pid %d, runner's %d", pid, r.Status().Pid)
	}
	want := "starting as nobody in " + dir + " with from-the-sandbox"
	testutil.WaitFor(t, 10*time.Second, "the start command's first line in the log", func() bool {
		return strings.Contains(f.log.String(), "start-cmd: "+want)
	})
	code, body = health(t, r)
	t.Logf("/health while waiting: %s", body.Message)
	if code != http.StatusServiceUnavailable || !strings.Contains(body.Message, want) {
		t.Errorf("/health while waiting: %d %q, want 503 with the output so far", code, body.Message)
	}

	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, r, http.StatusNoContent)
	if st := r.Status(); st.State != Ready || st.Message != "" {
		t.Errorf("status once ready: %+v", st)
	}
	if procs := f.list(t); len(procs) != 1 || procs[0].GetTag() != Tag {
		t.Errorf("once ready, listed %v: the ready check must never be listed, the start command stays", procs)
	}
	testutil.WaitFor(t, 10*time.Second, "stderr's line in the log", func() bool {
		return strings.Contains(f.log.String(), `msg="start-cmd: listening" stream=stderr`)
	})
}

// TestFailure: a start command that ends, after which the ready check
// fails, fails the sandbox with 500: the message names both commands, the
// exit status and the tail of the output. So does a start command that
// cannot start at all.
func TestFailure(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		want     []string
		wantExit *int32
	}{
		{
			name: "start command exits and the check fails",
			cfg:  Config{Cmd: "echo preparing; echo 'fatal: no config file' >&2; exit 3", Ready: "echo not up >&2; exit 7"},
			// stdout and stderr reach the tail through two pipes: in either order.
			want:     []string{`"echo preparing;`, "exit status 3", "exit status 7", `"not up"`, "preparing", "fatal: no config file"},
			wantExit: ptr(int32(3)),
		},
		{
			name: "start command exits 0 and the check fails",
			cfg:  Config{Cmd: "true", Ready: "false"},
			want: []string{"exit status 0", "exit status 1", "it has written nothing"},
		},
		{
			name: "no such user",
			cfg:  Config{Cmd: "sleep 600", Ready: "true", User: "no-such-user-here"},
			want: []string{"could not start", `"no-such-user-here"`},
		},
		{
			name: "no such directory",
			cfg:  Config{Cmd: "sleep 600", Dir: "/no/such/dir"},
			want: []string{"could not start", "/no/such/dir"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.cfg.Interval = 20 * time.Millisecond
			r := f.start(t, tt.cfg)
			body := waitHealth(t, r, http.StatusInternalServerError)
			t.Logf("/health: %s", body.Message)
			if body.State != "failed" {
				t.Errorf("state %q, want failed", body.State)
			}
			for _, w := range tt.want {
				if !strings.Contains(body.Message, w) {
					t.Errorf("message %q lacks %q", body.Message, w)
				}
			}
			if tt.wantExit != nil && (body.ExitCode == nil || *body.ExitCode != *tt.wantExit) {
				t.Errorf("exitCode %v, want %d", body.ExitCode, *tt.wantExit)
			}
			if got, _ := health(t, r); got != http.StatusInternalServerError {
				t.Errorf("a failure is final, /health then answered %d", got)
			}
		})
	}
}

// TestReady covers the ways to become ready other than a check that
// passes while the start command runs.
func TestReady(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(dir string) Config
		// listed is whether the start command still runs once ready.
		listed bool
	}{
		{
			name:   "no ready check: ready once started",
			cfg:    func(string) Config { return Config{Cmd: "exec sleep 600"} },
			listed: true,
		},
		{
			name: "start command ends after making the check pass",
			cfg:  func(dir string) Config { return Config{Cmd: "touch ready", Ready: "[ -e ready ]", Dir: dir} },
		},
		{
			name: "a ready check alone",
			cfg:  func(dir string) Config { return Config{Ready: "touch tried; [ -e tried ]", Dir: dir} },
		},
		{
			name: "a try that hangs is killed and tried again",
			cfg: func(dir string) Config {
				return Config{Cmd: "exec sleep 600", Ready: "[ -e tried ] && exit 0; touch tried; exec sleep 600", Dir: dir, TryTimeout: 300 * time.Millisecond}
			},
			listed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			cfg := tt.cfg(t.TempDir())
			cfg.Interval = 20 * time.Millisecond
			r := f.start(t, cfg)
			waitHealth(t, r, http.StatusNoContent)
			procs := f.list(t)
			if tt.listed && (len(procs) != 1 || procs[0].GetTag() != Tag) {
				t.Errorf("listed %v, want the start command alone", procs)
			}
			if !tt.listed && len(procs) != 0 {
				t.Errorf("listed %v, want nothing", procs)
			}
		})
	}
}

// TestHealthOtherMethods: only GET and HEAD are the runner's; the rest go
// to the agent's own handler, which refuses them.
func TestHealthOtherMethods(t *testing.T) {
	f := newFixture(t)
	r := f.start(t, Config{Cmd: "exec sleep 600", Ready: "false"})
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusMethodNotAllowed) })
	for method, want := range map[string]int{http.MethodHead: http.StatusServiceUnavailable, http.MethodPost: http.StatusMethodNotAllowed} {
		rec := httptest.NewRecorder()
		r.Health(next).ServeHTTP(rec, httptest.NewRequest(method, "/health", nil))
		if rec.Code != want {
			t.Errorf("%s /health: %d, want %d", method, rec.Code, want)
		}
	}
}
