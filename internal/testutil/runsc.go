package testutil

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// RawRunsc drives runsc by hand, with no Tupper in between: benchmarks
// measure Tupper's figures beside it in the same run.
type RawRunsc struct {
	tb     testing.TB
	runsc  string
	root   string
	rootfs string
}

// NewRawRunsc returns a RawRunsc whose containers run rootfs read-only with
// no network, their writes kept in memory.
func NewRawRunsc(tb testing.TB, rootfs string) *RawRunsc {
	tb.Helper()
	r := &RawRunsc{tb: tb, runsc: RequiresRunsc(tb), rootfs: rootfs}
	dir, err := os.MkdirTemp("", "raw-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	r.root = dir
	return r
}

// Bundle writes a bundle that runs args and returns its directory.
func (r *RawRunsc) Bundle(args ...string) string {
	r.tb.Helper()
	dir, err := os.MkdirTemp(r.root, "bundle-")
	if err != nil {
		r.tb.Fatal(err)
	}
	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{Args: args, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/"},
		Root:    &specs.Root{Path: r.rootfs, Readonly: true},
		Mounts:  []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}, {Destination: "/tmp", Type: "tmpfs", Source: "tmpfs"}},
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{
			{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
			{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
		}},
	}
	data, err := json.Marshal(spec)
	if err != nil {
		r.tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		r.tb.Fatal(err)
	}
	return dir
}

// Run runs runsc with args (after its global flags), stdin from in (nil for
// none) and stdout to out (nil to discard), failing the test on error.
func (r *RawRunsc) Run(in io.Reader, out io.Writer, args ...string) {
	r.tb.Helper()
	full := append([]string{"--root", filepath.Join(r.root, "state"), "--network=none", "--platform=systrap"}, args...)
	cmd := exec.Command(r.runsc, full...)
	cmd.Stdin = in
	// A file, not a pipe, for stderr: a detached container keeps its stdio
	// open, and a pipe would never reach EOF.
	errFile, err := os.CreateTemp(r.root, "stderr-")
	if err != nil {
		r.tb.Fatal(err)
	}
	defer os.Remove(errFile.Name())
	defer errFile.Close()
	cmd.Stderr = errFile
	if out != nil {
		cmd.Stdout = out
	} else {
		cmd.Stdout = errFile
	}
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(errFile.Name())
		r.tb.Fatalf("runsc %v: %v: %s", args, err, msg)
	}
}
