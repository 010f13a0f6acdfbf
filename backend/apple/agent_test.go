package apple

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

func TestAgentDir(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tupper-agent")
	orig, err := os.ReadFile(agentBinary(t, runtime.GOARCH))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, orig, 0o700); err != nil {
		t.Fatal(err)
	}
	a := &agentDir{dir: t.TempDir(), arch: runtime.GOARCH}
	dir, err := a.ensure(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "tupper-agent")
	st, err := os.Stat(dst)
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("the agent's copy: %v, %v; want a 0755 file", st, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the agent's directory holds %d entries, want the agent alone", len(ents))
	}

	// A new process finds the same agent there and leaves it.
	a2 := &agentDir{dir: a.dir, arch: runtime.GOARCH}
	if _, err := a2.ensure(src); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(dst); !os.SameFile(st, st2) {
		t.Error("an unchanged agent was copied again")
	}

	// A changed agent replaces the copy (by rename: a running container
	// keeps the file it started).
	changed := append(bytes.Clone(orig), 0)
	if err := os.WriteFile(src, changed, 0o700); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	os.Chtimes(src, later, later)
	if _, err := a2.ensure(src); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, changed) {
		t.Error("the agent's copy was not replaced by the changed agent")
	}
	if st3, _ := os.Stat(dst); os.SameFile(st, st3) {
		t.Error("the changed agent was written over the old file, not renamed onto it")
	}
}

func TestCheckAgent(t *testing.T) {
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	if other == "" {
		t.Skip("the agent is built for amd64 and arm64 only")
	}
	agent := agentBinary(t, runtime.GOARCH)
	if err := checkAgent(agent, runtime.GOARCH); err != nil {
		t.Errorf("checkAgent of the agent: %v", err)
	}
	if err := checkAgent(agent, other); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "GOOS=linux GOARCH="+other) {
		t.Errorf("checkAgent for another architecture = %v; want it to say how to build the right one", err)
	}
	notELF := filepath.Join(t.TempDir(), "agent.sh")
	os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755)
	if err := checkAgent(notELF, runtime.GOARCH); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "no linux executable") {
		t.Errorf("checkAgent of a script = %v", err)
	}
	if runtime.GOOS == "linux" {
		dynamic, err := exec.LookPath("true")
		if err != nil {
			t.Skip("no true on $PATH")
		}
		if err := checkAgent(dynamic, runtime.GOARCH); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
			t.Errorf("checkAgent of %s = %v; want it refused as dynamically linked", dynamic, err)
		}
	}
}
