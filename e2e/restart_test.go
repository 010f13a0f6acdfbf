package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/internal/testutil"
	pb "github.com/lightbearco/tupper/proto/process"
	"github.com/lightbearco/tupper/proto/process/processconnect"
)

// TestServeRestart kills `tupper serve` with SIGKILL while sandboxes run
// and a command streams its output to a client, and starts it again on the
// same root and port. Nothing may be lost: every sandbox is listed and
// usable, the command still runs and can be re-attached by pid, timeouts
// still fire (one that expired while the daemon was down, and one set
// afterwards), and a sandbox whose runsc processes died while the daemon
// was down is reported killed, not silently dropped.
func TestServeRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes and restarts the daemon")
	}
	d := startServeDaemon(t)
	ctx := context.Background()

	keep := d.createSandbox(t, map[string]any{"metadata": map[string]string{"role": "keep"}, "envVars": map[string]string{"GREETING": "still here"}, "timeout": 300})
	doomed := d.createSandbox(t, map[string]any{"metadata": map[string]string{"role": "doomed"}, "timeout": 300})
	short := d.createSandbox(t, map[string]any{"metadata": map[string]string{"role": "short"}, "timeout": 300})
	before := d.listSandboxes(t)

	// A command that streams until killed, followed by a client.
	conn := d.dataPlane(keep)
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	ticker, err := conn.proc.Start(streamCtx, sandboxRequest(conn, &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", `i=0; while :; do echo "tick $i"; i=$((i+1)); sleep 0.2; done`}},
		Tag:     new("ticker"),
	}))
	if err != nil {
		t.Fatalf("start the ticker: %v", err)
	}
	events := receiveAll(ticker, (*pb.StartResponse).GetEvent)
	pid := (<-events).startPID(t)
	firstTicks := collectStdout(t, events, 3)
	t.Logf("ticker pid %d streams %q", pid, firstTicks)

	// A sandbox whose time runs out while the daemon is down.
	expiring := d.createSandbox(t, map[string]any{"metadata": map[string]string{"role": "expiring"}, "timeout": 4})
	expiresAt := time.Now().Add(4 * time.Second)

	d.crash(t)
	crashedAt := time.Now()

	// The stream's client learns at once that its daemon is gone.
	ended := time.After(10 * time.Second)
drain:
	for {
		select {
		case ev, ok := <-events:
			if !ok || ev.err != nil {
				break drain
			}
		case <-ended:
			t.Error("the output stream did not end within 10 s of the daemon's death")
			break drain
		}
	}

	// While the daemon is down, one sandbox's runsc processes die.
	testutil.CrashSandbox(t, doomed.ID)
	if wait := time.Until(expiresAt.Add(time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	d.start(t)
	t.Logf("the daemon was down for %v", time.Since(crashedAt).Round(time.Millisecond))

	t.Run("records", func(t *testing.T) {
		after := d.listSandboxes(t)
		for id, md := range before {
			if id == doomed.ID {
				continue
			}
			if got, ok := after[id]; !ok {
				t.Errorf("sandbox %s (%v) is not listed after the restart", id, md)
			} else if got["role"] != md["role"] {
				t.Errorf("sandbox %s: metadata %v after the restart, was %v", id, got, md)
			}
		}
		for id := range after {
			if id != expiring.ID && !slices.Contains([]string{keep.ID, short.ID}, id) {
				t.Errorf("sandbox %s is listed after the restart, and should not be", id)
			}
		}
	})

	t.Run("died while down", func(t *testing.T) {
		status, body := d.getSandbox(t, doomed.ID)
		if status != http.StatusNotFound || !strings.Contains(string(body), "died while the engine was down") {
			t.Errorf("GET /sandboxes/%s = %d %s, want 404 saying it died while the engine was down", doomed.ID, status, body)
		}
		if _, ok := d.listSandboxes(t)[doomed.ID]; ok {
			t.Errorf("sandbox %s, whose processes died, is still listed", doomed.ID)
		}
		if !logMentions(d.log(), "sandbox died while the engine was down", doomed.ID) {
			t.Errorf("the daemon's log does not report that sandbox %s died while it was down", doomed.ID)
		}
		status, _, err := d.api(ctx, http.MethodDelete, "/sandboxes/"+doomed.ID, nil)
		if err != nil || status != http.StatusNotFound {
			t.Errorf("DELETE the dead sandbox = %d, %v; want 404", status, err)
		}
	})

	t.Run("expired while down", func(t *testing.T) {
		testutil.WaitFor(t, 30*time.Second, "the sandbox that expired while the daemon was down to be killed", func() bool {
			status, _ := d.getSandbox(t, expiring.ID)
			return status == http.StatusNotFound
		})
		if !logMentions(d.log(), "sandbox killed", expiring.ID, "reason=timeout") {
			t.Errorf("the daemon's log does not say sandbox %s was killed by its timeout", expiring.ID)
		}
	})

	t.Run("usable", func(t *testing.T) {
		// A client that reconnects reads the sandbox again, as the SDKs'
		// Sandbox.connect does: the same access token still opens it.
		status, body := d.getSandbox(t, keep.ID)
		var info struct {
			EnvdAccessToken string `json:"envdAccessToken"`
			State           string `json:"state"`
		}
		if err := json.Unmarshal(body, &info); status != http.StatusOK || err != nil {
			t.Fatalf("GET /sandboxes/%s = %d %s (%v)", keep.ID, status, body, err)
		}
		if info.EnvdAccessToken != keep.Token || info.State != "running" {
			t.Errorf("after the restart the sandbox is %q with token %q, want running with its old token", info.State, info.EnvdAccessToken)
		}
		for _, sb := range []*createdSandbox{keep, short} {
			if got := d.dataPlane(sb).run(t, `echo "$GREETING|$(whoami)"`); !strings.HasSuffix(got, "|user\n") {
				t.Errorf("sandbox %s: command output %q", sb.ID, got)
			}
		}
		if got := conn.run(t, `echo "$GREETING"`); got != "still here\n" {
			t.Errorf("the sandbox's environment after the restart: %q", got)
		}
	})

	t.Run("re-attach", func(t *testing.T) {
		list, err := conn.proc.List(ctx, sandboxRequest(conn, &pb.ListRequest{}))
		if err != nil {
			t.Fatalf("list processes: %v", err)
		}
		if !slices.ContainsFunc(list.Msg.GetProcesses(), func(p *pb.ProcessInfo) bool { return p.GetPid() == pid && p.GetTag() == "ticker" }) {
			t.Errorf("the ticker (pid %d) is not among the processes after the restart: %v", pid, list.Msg.GetProcesses())
		}
		attachCtx, detach := context.WithCancel(ctx)
		defer detach()
		again, err := conn.proc.Connect(attachCtx, sandboxRequest(conn, &pb.ConnectRequest{
			Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
		}))
		if err != nil {
			t.Fatalf("re-attach to pid %d: %v", pid, err)
		}
		evs := receiveAll(again, (*pb.ConnectResponse).GetEvent)
		if got := (<-evs).startPID(t); got != pid {
			t.Errorf("re-attached to pid %d, want %d", got, pid)
		}
		// The ticker kept counting while the daemon was down: it still runs.
		ticks := collectStdout(t, evs, 2)
		// It ticks five times a second and the daemon was down for
		// seconds: had it stopped or restarted, it would be far behind.
		if n, was := lastTick(ticks), lastTick(firstTicks); n < was+10 {
			t.Errorf("after the restart the ticker prints %q, too little past %q: it did not run all along", ticks, firstTicks)
		}
		if _, err := conn.proc.SendSignal(ctx, sandboxRequest(conn, &pb.SendSignalRequest{
			Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
			Signal:  pb.Signal_SIGNAL_SIGKILL,
		})); err != nil {
			t.Fatalf("kill the ticker: %v", err)
		}
		deadline := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-evs:
				if !ok || ev.err != nil {
					t.Fatalf("the re-attached stream ended without an end event: %v", ev.err)
				}
				if end := ev.msg.GetEnd(); end != nil {
					if end.GetExitCode() == 0 {
						t.Errorf("the killed ticker ended with %+v", end)
					}
					return
				}
			case <-deadline:
				t.Fatal("no end event within 10 s of killing the re-attached ticker")
			}
		}
	})

	t.Run("timeouts fire", func(t *testing.T) {
		status, body, err := d.api(ctx, http.MethodPost, "/sandboxes/"+short.ID+"/timeout", map[string]int{"timeout": 2})
		if err != nil || status != http.StatusNoContent {
			t.Fatalf("set a 2 s timeout: %d %s %v", status, body, err)
		}
		testutil.WaitFor(t, 30*time.Second, "the sandbox to die of its new timeout", func() bool {
			status, _ := d.getSandbox(t, short.ID)
			return status == http.StatusNotFound
		})
		if got := d.listSandboxes(t); len(got) != 1 || got[keep.ID] == nil {
			t.Errorf("after the timeout the sandboxes are %v, want only %s", got, keep.ID)
		}
	})

	t.Run("graceful stop leaves sandboxes running", func(t *testing.T) {
		d.stop(t) // SIGTERM
		d.start(t)
		if got := d.listSandboxes(t); got[keep.ID] == nil {
			t.Fatalf("after a SIGTERM and a start the sandboxes are %v, want %s", got, keep.ID)
		}
		conn := d.dataPlane(keep)
		if out := conn.run(t, "echo after-sigterm"); out != "after-sigterm\n" {
			t.Errorf("a command after the graceful restart printed %q", out)
		}
	})
}

// createdSandbox is what create answered.
type createdSandbox struct {
	ID    string `json:"sandboxID"`
	Token string `json:"envdAccessToken"`
}

// createSandbox creates a sandbox through POST /v2/sandboxes.
func (d *serveDaemon) createSandbox(t *testing.T, body map[string]any) *createdSandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	status, out, err := d.api(ctx, http.MethodPost, "/v2/sandboxes", body)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("create a sandbox: %d %s %v", status, out, err)
	}
	var sb createdSandbox
	if err := json.Unmarshal(out, &sb); err != nil || sb.ID == "" || sb.Token == "" {
		t.Fatalf("create answered %s (%v): want a sandbox id and an access token", out, err)
	}
	return &sb
}

// listSandboxes returns the running and paused sandboxes with their
// metadata, by id.
func (d *serveDaemon) listSandboxes(t *testing.T) map[string]map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	status, out, err := d.api(ctx, http.MethodGet, "/v2/sandboxes", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("list sandboxes: %d %s %v", status, out, err)
	}
	var page []struct {
		ID       string            `json:"sandboxID"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(out, &page); err != nil {
		t.Fatalf("list sandboxes: %s: %v", out, err)
	}
	m := map[string]map[string]string{}
	for _, p := range page {
		m[p.ID] = p.Metadata
	}
	return m
}

// getSandbox answers GET /sandboxes/{id}.
func (d *serveDaemon) getSandbox(t *testing.T, id string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	status, out, err := d.api(ctx, http.MethodGet, "/sandboxes/"+id, nil)
	if err != nil {
		t.Fatalf("GET /sandboxes/%s: %v", id, err)
	}
	return status, out
}

// sandboxConn is one sandbox's data plane through the daemon, as the E2B
// SDKs use it: the envd process service over Connect with JSON, routed by
// the E2b-Sandbox-Id header and opened by the sandbox's access token.
type sandboxConn struct {
	id, token string
	proc      processconnect.ProcessClient
}

func (d *serveDaemon) dataPlane(sb *createdSandbox) *sandboxConn {
	return &sandboxConn{
		id: sb.ID, token: sb.Token,
		proc: processconnect.NewProcessClient(http.DefaultClient, d.URL, connect.WithProtoJSON()),
	}
}

// sandboxRequest wraps msg with c's routing and access headers.
func sandboxRequest[T any](c *sandboxConn, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set("E2b-Sandbox-Id", c.id)
	req.Header().Set("E2b-Sandbox-Port", "49983")
	req.Header().Set("X-Access-Token", c.token)
	req.Header().Set("Keepalive-Ping-Interval", "50")
	return req
}

// run runs a bash command to its end and returns its standard output; a
// failure fails the test.
func (c *sandboxConn) run(t *testing.T, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := c.proc.Start(ctx, sandboxRequest(c, &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", script}},
	}))
	if err != nil {
		t.Fatalf("sandbox %s: start %q: %v", c.id, script, err)
	}
	defer stream.Close()
	var out strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		if end := ev.GetEnd(); end != nil {
			if end.GetExitCode() != 0 {
				t.Fatalf("sandbox %s: %q ended with %+v", c.id, script, end)
			}
			return out.String()
		}
	}
	t.Fatalf("sandbox %s: the stream of %q ended without an end event: %v", c.id, script, stream.Err())
	return ""
}

// streamEvent is one message of a process stream, or the error that ended
// it.
type streamEvent struct {
	msg *pb.ProcessEvent
	err error
}

func (e streamEvent) startPID(t *testing.T) uint32 {
	t.Helper()
	if e.err != nil || e.msg.GetStart() == nil {
		t.Fatalf("want a start event first, got %v (err %v)", e.msg, e.err)
	}
	return e.msg.GetStart().GetPid()
}

// receiveAll turns a Start or Connect stream into a channel of its events,
// closed after the stream ends (with an event holding the error, if any).
func receiveAll[T any](stream *connect.ServerStreamForClient[T], event func(*T) *pb.ProcessEvent) <-chan streamEvent {
	ch := make(chan streamEvent, 256)
	go func() {
		defer close(ch)
		defer stream.Close()
		for stream.Receive() {
			ch <- streamEvent{msg: event(stream.Msg())}
		}
		err := stream.Err()
		if err == nil {
			err = errors.New("stream closed")
		}
		ch <- streamEvent{err: err}
	}()
	return ch
}

// collectStdout reads events until at least n lines of standard output
// came, and returns them.
func collectStdout(t *testing.T, events <-chan streamEvent, n int) string {
	t.Helper()
	var out strings.Builder
	deadline := time.After(20 * time.Second)
	for strings.Count(out.String(), "\n") < n {
		select {
		case ev, ok := <-events:
			if !ok || ev.err != nil {
				t.Fatalf("the stream ended after %q: %v", out.String(), ev.err)
			}
			out.Write(ev.msg.GetData().GetStdout())
		case <-deadline:
			t.Fatalf("only %q after 20 s, want %d lines", out.String(), n)
		}
	}
	return out.String()
}

var tickLine = regexp.MustCompile(`tick (\d+)`)

// lastTick returns the number of the last "tick N" line in s, or -1.
func lastTick(s string) int {
	m := tickLine.FindAllStringSubmatch(s, -1)
	if len(m) == 0 {
		return -1
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// logMentions reports whether one line of log holds every one of words.
func logMentions(log string, words ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, w := range words {
			if !strings.Contains(line, w) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}
