package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestNames(t *testing.T) {
	tests := []struct {
		name, s string
		want    bool
	}{
		{"a path below", "runsc --root /tmp/te-1/backends/gvisor/runsc", true},
		{"the directory at the end", "tupper --root /tmp/te-1", true},
		{"the directory between arguments", "tupper\x00--root\x00/tmp/te-1\x00serve\x00", true},
		{"a longer name is another directory", "tupper --root /tmp/te-12 serve", false},
		{"a later occurrence counts", "/tmp/te-12 /tmp/te-1/x", true},
		{"not there", "bash -c true", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := names(tt.s, "/tmp/te-1"); got != tt.want {
				t.Errorf("names(%q) = %v, want %v", tt.s, got, tt.want)
			}
		})
	}
}

// TestLeftovers plants what a sandbox might leave (a process naming the
// root, a state file, an image lease) and finds each, and nothing of a
// sandbox that is kept.
func TestLeftovers(t *testing.T) {
	root := t.TempDir()
	images := t.TempDir()
	state := filepath.Join(root, "backends")
	if err := os.MkdirAll(filepath.Join(state, "sandboxes"), 0o700); err != nil {
		t.Fatal(err)
	}
	baseline := Tree(t, state)
	if left := Leftovers(t, Leaks{Root: root, Baseline: baseline, ImageRoot: images}); len(left) > 0 {
		t.Fatalf("an untouched root has leftovers: %v", left)
	}

	for _, p := range []string{filepath.Join(state, "sandboxes", "gone"), filepath.Join(state, "sandboxes", "kept"), filepath.Join(images, "leases")} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(images, "leases", "e1234-gone"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sh", "-c", "sleep 600; :", filepath.Join(root, "sandboxes", "gone"))
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(-sleeper.Process.Pid, syscall.SIGKILL); sleeper.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	var left []string
	for {
		left = Leftovers(t, Leaks{Root: root, Baseline: baseline, ImageRoot: images, IDs: []string{"gone"}, Keep: []string{"kept"}})
		if slices.ContainsFunc(left, func(s string) bool { return strings.HasPrefix(s, "process ") }) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the child has not exec'd yet
	}
	for _, want := range []string{"process ", "file " + filepath.Join(state, "sandboxes", "gone"), "image lease "} {
		if !slices.ContainsFunc(left, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("leftovers %q miss %q", left, want)
		}
	}
	if slices.ContainsFunc(left, func(s string) bool { return strings.Contains(s, "kept") }) {
		t.Errorf("leftovers %q name the kept sandbox", left)
	}
	// sh forks sleep: until the child has exec'd, it is a second process
	// with sh's command line. Wait that moment out.
	deadline = time.Now().Add(10 * time.Second)
	for {
		left = Leftovers(t, Leaks{Root: root, IgnorePIDs: []int{sleeper.Process.Pid}})
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("with the process ignored and no file check: %v", left)
	}
}
