package apple

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	agentsMu      sync.Mutex
	agents        = map[string]string{} // by GOARCH
	agentBuildDir string

	standinOnce sync.Once
	standinDir  string
	standinBin  string
	standinErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range []string{standinDir, agentBuildDir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// standinBinary builds the stand-in `container` CLI
// (internal/standin) once per test binary.
func standinBinary(t testing.TB) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the tests drive the stand-in through a shell script")
	}
	standinOnce.Do(func() {
		standinDir, standinErr = os.MkdirTemp("", "container-standin-")
		if standinErr != nil {
			return
		}
		standinBin = filepath.Join(standinDir, "container")
		cmd := exec.Command("go", "build", "-o", standinBin, "./backend/apple/internal/standin")
		cmd.Dir = moduleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			standinErr = fmt.Errorf("build the stand-in: %v: %s", err, out)
		}
	})
	if standinErr != nil {
		t.Fatal(standinErr)
	}
	return standinBin
}

// moduleRoot is the repository's root directory.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// agentBinary returns a static linux tupper-agent for goarch, built once
// per test binary. (internal/testutil, which builds the host's, does not
// build on macOS, where the real platform's tests run.) $TUPPER_AGENT is
// used for the host's architecture on Linux, as testutil does.
func agentBinary(t testing.TB, goarch string) string {
	t.Helper()
	if p := os.Getenv("TUPPER_AGENT"); p != "" && runtime.GOOS == "linux" && goarch == runtime.GOARCH {
		return p
	}
	agentsMu.Lock()
	defer agentsMu.Unlock()
	if p := agents[goarch]; p != "" {
		return p
	}
	if agentBuildDir == "" {
		d, err := os.MkdirTemp("", "tupper-agent-apple-")
		if err != nil {
			t.Fatal(err)
		}
		agentBuildDir = d
	}
	p := filepath.Join(agentBuildDir, "tupper-agent-linux-"+goarch)
	cmd := exec.Command("go", "build", "-o", p, "./cmd/tupper-agent")
	cmd.Dir = moduleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build tupper-agent for linux/%s: %v: %s", goarch, err, out)
	}
	agents[goarch] = p
	return p
}

// standin is one stand-in `container` with a state directory of its own.
type standin struct {
	path string // the CLI to give the backend: a script that sets env
	dir  string // the stand-in's state
	log  string // where it writes each command line
}

// newStandin makes a stand-in CLI with the settings env ("KEY=VALUE", see
// internal/standin) and a fresh state directory.
func newStandin(t *testing.T, env ...string) *standin {
	t.Helper()
	s := &standin{dir: t.TempDir()}
	s.log = filepath.Join(t.TempDir(), "argv.jsonl")
	return s.with(t, env...)
}

// with returns a stand-in on s's state and log with the settings env.
func (s *standin) with(t *testing.T, env ...string) *standin {
	t.Helper()
	bin := standinBinary(t)
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	for _, kv := range append([]string{envDirVar + "=" + s.dir, envLogVar + "=" + s.log}, env...) {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s='%s'\n", k, strings.ReplaceAll(v, "'", `'\''`))
	}
	fmt.Fprintf(&b, "exec '%s' \"$@\"\n", bin)
	p := filepath.Join(t.TempDir(), "container")
	if err := os.WriteFile(p, []byte(b.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	return &standin{path: p, dir: s.dir, log: s.log}
}

// The stand-in's environment (internal/standin's doc).
const (
	envDirVar   = "TUPPER_CONTAINER_STANDIN_DIR"
	envLogVar   = "TUPPER_CONTAINER_STANDIN_LOG"
	envAddrVar  = "TUPPER_CONTAINER_STANDIN_ADDR"
	envShapeVar = "TUPPER_CONTAINER_STANDIN_SHAPE"
	envFailVar  = "TUPPER_CONTAINER_STANDIN_FAIL"
)

// calls returns the command lines the stand-in ran, and forgets them.
func (s *standin) calls(t *testing.T) [][]string {
	t.Helper()
	f, err := os.Open(s.log)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var args []string
		if err := json.Unmarshal(sc.Bytes(), &args); err != nil {
			t.Fatal(err)
		}
		out = append(out, args)
	}
	if err := os.Truncate(s.log, 0); err != nil {
		t.Fatal(err)
	}
	return out
}

// containers returns the names of the containers the stand-in holds.
func (s *standin) containers(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.dir, "containers"))
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// run runs the stand-in CLI as a user would, and fails the test if it
// fails.
func (s *standin) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(s.path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("container %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// agentAt listens at a loopback address of its own on the agent's port, as
// a container's agent would, and returns the address; connections are
// accepted and closed. It skips the test where no such address can be
// had (macOS has 127.0.0.1 alone).
func agentAt(t *testing.T) string {
	t.Helper()
	for range 10 {
		ip := fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(100), rand.IntN(256), 1+rand.IntN(254))
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "49983"))
		if err != nil {
			continue
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return ip
	}
	t.Skip("no loopback address of its own to listen on (they are 127.0.0.0/8 on Linux)")
	return ""
}

// nobodyAt returns a loopback address where nothing listens.
func nobodyAt(t *testing.T) string {
	t.Helper()
	for range 10 {
		ip := fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(100), rand.IntN(256), 1+rand.IntN(254))
		c, err := net.Dial("tcp", net.JoinHostPort(ip, "49983"))
		if err != nil {
			return ip
		}
		c.Close()
	}
	t.Fatal("every loopback address tried answers on 49983")
	return ""
}

// tinyRoot returns a small directory tree to boot from.
func tinyRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "etc", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte("tiny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}
