package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/internal/testutil"
	pb "github.com/lightbearco/tupper/proto/process"
	"github.com/lightbearco/tupper/proto/process/processconnect"
)

// runMainEnv makes the test binary act as the agent itself, so the tests
// run the real main without building a second binary.
const runMainEnv = "TUPPER_AGENT_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    options
		wantErr bool
	}{
		{name: "defaults", want: options{addr: ":49983", user: "user", tokenFD: -1, insideConns: defaultInsideConns}},
		{name: "no inside cap", args: []string{"--inside-conns", "0"}, want: options{addr: ":49983", user: "user", tokenFD: -1}},
		{
			name: "all",
			args: []string{"--addr", "127.0.0.1:1", "--user", "root", "--access-token-file", "/t", "--no-ensure-user"},
			want: options{addr: "127.0.0.1:1", user: "root", tokenFile: "/t", tokenFD: -1, noEnsureUser: true, insideConns: defaultInsideConns},
		},
		{
			name: "vsock",
			args: []string{"--vsock-port", "49983", "--vsock-forward-port", "49984"},
			want: options{addr: ":49983", user: "user", tokenFD: -1, vsockPort: 49983, vsockForwardPort: 49984, insideConns: defaultInsideConns},
		},
		{
			name: "start command",
			args: []string{"--start-cmd", "python3 -m http.server", "--ready-cmd", "curl -sf localhost:8000", "--start-user", "app", "--start-dir", "/srv"},
			want: options{addr: ":49983", user: "user", tokenFD: -1, insideConns: defaultInsideConns,
				startCmd: "python3 -m http.server", readyCmd: "curl -sf localhost:8000", startUser: "app", startDir: "/srv"},
		},
		{name: "vsock ports equal", args: []string{"--vsock-port", "5", "--vsock-forward-port", "5"}, wantErr: true},
		{name: "vsock port too big", args: []string{"--vsock-port", "4294967295"}, wantErr: true},
		{name: "stray argument", args: []string{"serve"}, wantErr: true},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlags(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			got.logOut = nil
			if got != tt.want {
				t.Errorf("= %+v, want %+v", got, tt.want)
			}
		})
	}
}

// tokenTransport adds the access token to every request.
type tokenTransport struct{ token string }

func (tt tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Access-Token", tt.token)
	return http.DefaultTransport.RoundTrip(r)
}

type agentProc struct {
	cmd    *exec.Cmd
	url    string
	client processconnect.ProcessClient
	logs   *bytes.Buffer
}

// startAgent runs the agent on a free loopback port, as PID 1 of a new
// PID namespace when pid1 is set.
func startAgent(t *testing.T, pid1 bool, env ...string) *agentProc {
	t.Helper()
	return startAgentArgs(t, pid1, nil, env...)
}

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startAgentArgs is startAgent with more arguments for the agent.
func startAgentArgs(t *testing.T, pid1 bool, more []string, env ...string) *agentProc {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root: the agent runs commands through setuid")
	}
	addr := freeAddr(t)
	args := append([]string{"--addr", addr, "--user", "root", "--no-ensure-user"}, more...)
	var cmd *exec.Cmd
	if pid1 {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			testutil.Skip(t, "needs unshare (util-linux) to make a PID namespace")
		}
		cmd = exec.Command(unshare, append([]string{"--pid", "--fork", "--mount-proc", "--kill-child", os.Args[0]}, args...)...)
	} else {
		cmd = exec.Command(os.Args[0], args...)
	}
	logs := &bytes.Buffer{}
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1", "TUPPER_ACCESS_TOKEN=secret"), env...)
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agentProc{cmd: cmd, url: "http://" + addr, logs: logs}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("agent logs:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := http.Get(a.url + "/health")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusNoContent {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not healthy after 10s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.client = processconnect.NewProcessClient(&http.Client{Transport: tokenTransport{"secret"}}, a.url, connect.WithProtoJSON())
	return a
}

// run runs script in the agent and returns its stdout and exit code.
func (a *agentProc) run(t *testing.T, script string) (string, int32) {
	t.Helper()
	stream, err := a.client.Start(t.Context(), connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out bytes.Buffer
	var code int32 = -100
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		if end := ev.GetEnd(); end != nil {
			code = end.GetExitCode()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	return out.String(), code
}

// agentPid returns the host pid of the agent process itself.
func (a *agentProc) agentPid(t *testing.T, pid1 bool) int {
	if !pid1 {
		return a.cmd.Process.Pid
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", a.cmd.Process.Pid, a.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("children of unshare %q: %v", b, err)
	}
	return pid
}

func TestAgent(t *testing.T) {
	for _, mode := range []struct {
		name string
		pid1 bool
	}{{"host process", false}, {"PID 1", true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			a := startAgent(t, mode.pid1)

			t.Run("token required", func(t *testing.T) {
				res, err := http.Post(a.url+"/process.Process/List", "application/json", strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusUnauthorized {
					t.Errorf("status %d without a token, want 401", res.StatusCode)
				}
			})

			t.Run("token kept from commands", func(t *testing.T) {
				if out, _ := a.run(t, "env"); strings.Contains(out, "TUPPER_ACCESS_TOKEN") || !strings.Contains(out, "HOME=/root") {
					t.Errorf("command environment:\n%s", out)
				}
				// Root in the sandbox can read the agent's own environment
				// block: the token must not be there either.
				if out, _ := a.run(t, "cat /proc/$PPID/environ /proc/1/environ 2>/dev/null | tr '\\0' '\\n'"); strings.Contains(out, "secret") {
					t.Errorf("the agent's environment block holds the token:\n%s", out)
				}
			})

			t.Run("pid 1", func(t *testing.T) {
				// The agent is this very binary, so it has this comm.
				self, err := os.ReadFile("/proc/self/comm")
				if err != nil {
					t.Fatal(err)
				}
				out, _ := a.run(t, "cat /proc/1/comm")
				if isAgent := out == string(self); isAgent != mode.pid1 {
					t.Errorf("PID 1 is %q; agent is %q", out, self)
				}
			})

			t.Run("orphans are reaped", func(t *testing.T) {
				out, code := a.run(t, "sleep 0.2 & echo $!")
				orphan := strings.TrimSpace(out)
				if code != 0 || orphan == "" {
					t.Fatalf("out %q code %d", out, code)
				}
				deadline := time.Now().Add(5 * time.Second)
				for {
					// A zombie still has /proc/<pid>; a reaped process has not.
					if _, code := a.run(t, "test -e /proc/"+orphan); code != 0 {
						return
					}
					if time.Now().After(deadline) {
						st, _ := a.run(t, "cat /proc/"+orphan+"/status")
						t.Fatalf("orphan %s not reaped:\n%s", orphan, st)
					}
					time.Sleep(100 * time.Millisecond)
				}
			})

			t.Run("SIGTERM reaches children, then the agent exits", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				stream, err := a.client.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{
					Cmd: "/bin/sh", Args: []string{"-c", `trap "echo bye; exit 7" TERM; echo ready; sleep 30 & wait`},
				}}))
				if err != nil {
					t.Fatal(err)
				}
				defer stream.Close()
				var out bytes.Buffer
				for !strings.Contains(out.String(), "ready") && stream.Receive() {
					out.Write(stream.Msg().GetEvent().GetData().GetStdout())
				}
				if err := syscall.Kill(a.agentPid(t, mode.pid1), syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				var end *pb.ProcessEvent_EndEvent
				for stream.Receive() {
					ev := stream.Msg().GetEvent()
					out.Write(ev.GetData().GetStdout())
					if ev.GetEnd() != nil {
						end = ev.GetEnd()
					}
				}
				if end.GetExitCode() != 7 || !strings.Contains(out.String(), "bye") {
					t.Errorf("end %v, output %q, stream err %v; want the trap's exit 7", end, out.String(), stream.Err())
				}
				waited := make(chan error, 1)
				go func() { waited <- a.cmd.Wait() }()
				select {
				case err := <-waited:
					if err != nil {
						t.Errorf("agent exit: %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("agent still running 10s after SIGTERM")
				}
			})
		})
	}
}

// TestNetworkEnvOutsideASandbox checks that an agent that is not a
// sandbox's first process leaves the host's resolv.conf, hosts and trust
// store alone, whatever the backend's variables say, and that commands
// never see those variables.
func TestNetworkEnvOutsideASandbox(t *testing.T) {
	before, _ := os.ReadFile("/etc/resolv.conf")
	a := startAgent(t, false, "TUPPER_NAMESERVER=192.0.2.99", "TUPPER_SANDBOX_ADDR=192.0.2.98", "TUPPER_TRUST_CA=not a certificate")
	after, _ := os.ReadFile("/etc/resolv.conf")
	if string(before) != string(after) {
		t.Fatalf("the host's resolv.conf changed:\n%s", after)
	}
	out, code := a.run(t, "env | grep -cE '^TUPPER_(NAMESERVER|SANDBOX_ADDR|TRUST_CA)=' || true")
	if code != 0 || strings.TrimSpace(out) != "0" {
		t.Errorf("commands see Tupper's variables: %q (exit %d)", out, code)
	}
	if !strings.Contains(a.logs.String(), "left alone") {
		t.Errorf("no warning in the agent's log:\n%s", a.logs.String())
	}
}

// TestInitRotatesToken runs the engine's call after a restore against the
// real agent, with its code interpreter (a process of its own): once /init
// has answered, the old token opens neither the agent nor the interpreter,
// and the new one opens both.
func TestInitRotatesToken(t *testing.T) {
	const newToken = "rotated-0123456789abcdef"
	interp := freeAddr(t)
	a := startAgentArgs(t, false, []string{"--code-interpreter", interp})
	post := func(u, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Access-Token", token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	execute := func(token string) (int, string) {
		t.Helper()
		return post("http://"+interp+"/execute", token, `{"code":"echo hi","language":"bash"}`)
	}
	// The interpreter's server takes the token only once it runs.
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body := execute("secret")
		if status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the code interpreter does not run a cell: %d %s", status, body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if status, body := post(a.url+"/init", "secret", `{"accessToken":"`+newToken+`"}`); status != http.StatusNoContent {
		t.Fatalf("/init: %d %s, want 204", status, body)
	}
	list := a.url + "/process.Process/List"
	if status, _ := post(list, "secret", "{}"); status != http.StatusUnauthorized {
		t.Errorf("the agent with the old token: %d, want 401", status)
	}
	if status, body := post(list, newToken, "{}"); status != http.StatusOK {
		t.Errorf("the agent with the new token: %d %s, want 200", status, body)
	}
	if status, _ := execute("secret"); status != http.StatusUnauthorized {
		t.Errorf("the interpreter with the old token: %d, want 401", status)
	}
	if status, body := execute(newToken); status != http.StatusOK || !strings.Contains(body, `"text":"hi\n"`) {
		t.Errorf("the interpreter with the new token: %d %s, want 200 and the cell's output", status, body)
	}

	// This agent is not the sandbox's first process: the network files
	// are the host's, and /init leaves them alone.
	before, _ := os.ReadFile("/etc/resolv.conf")
	if status, body := post(a.url+"/init", newToken, `{"nameserver":"127.0.0.53"}`); status != http.StatusConflict {
		t.Errorf("/init of the network outside a sandbox: %d %s, want 409", status, body)
	}
	if after, _ := os.ReadFile("/etc/resolv.conf"); string(after) != string(before) {
		t.Fatalf("the host's resolv.conf changed:\n%s", after)
	}

	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.cmd.Wait()
	if logs := a.logs.String(); strings.Contains(logs, newToken) || !strings.Contains(logs, "accessToken=replaced") {
		t.Errorf("the agent's logs do not say the token was replaced, or show it:\n%s", logs)
	}
}
