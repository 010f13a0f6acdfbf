package bench

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/lightbearco/tupper/backend/gvisor"
)

// RawRunsc measures runsc alone, as the floor the daemon's figures are set
// beside: `runsc run` of /bin/true in a bundle of its own, and `runsc exec`
// of /bin/true into a running container, with no network, agent or
// overlay, on the platform and shared root the gVisor backend uses.
type RawRunsc struct {
	// Runsc is the runsc binary.
	Runsc string
	// RootFS is a root filesystem with /bin/true and /bin/sleep, used
	// read-only and never written.
	RootFS string
}

// Measure runs `runsc run` and `runsc exec` runs times each, adding a
// sample to run and exec for every run that succeeds.
func (r *RawRunsc) Measure(ctx context.Context, runs int, run, execFig *Figure, prog *Progress) error {
	// Short: runsc's sockets live under its root and their paths must
	// stay under 108 bytes.
	dir, err := os.MkdirTemp("", "tb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root := filepath.Join(dir, "r")
	if err := os.Mkdir(root, 0o700); err != nil {
		return err
	}
	runBundle, err := rawBundle(filepath.Join(dir, "run"), r.RootFS, "/bin/true")
	if err != nil {
		return err
	}
	sleepBundle, err := rawBundle(filepath.Join(dir, "sleep"), r.RootFS, "/bin/sleep", "3600")
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("tupper-bench-%d", time.Now().UnixNano())

	prog.Start(run.Name, runs)
	for i := range runs {
		start := time.Now()
		if err := r.runsc(ctx, dir, root, "run", "--bundle", runBundle, fmt.Sprintf("%s-run%d", prefix, i)); err != nil {
			run.Fail(err)
		} else {
			run.AddDuration(time.Since(start))
		}
		prog.Step()
	}
	prog.End(outcome(run))

	prog.Start(execFig.Name, runs)
	id := prefix + "-exec"
	if err := r.runsc(ctx, dir, root, "run", "--detach", "--bundle", sleepBundle, id); err != nil {
		execFig.Fail(err)
		prog.End(outcome(execFig))
		return nil
	}
	defer r.runsc(context.WithoutCancel(ctx), dir, root, "delete", "--force", id)
	for range runs {
		start := time.Now()
		if err := r.runsc(ctx, dir, root, "exec", id, "/bin/true"); err != nil {
			execFig.Fail(err)
		} else {
			execFig.AddDuration(time.Since(start))
		}
		prog.Step()
	}
	prog.End(outcome(execFig))
	return nil
}

// runsc runs runsc with args under state root, its output in a file of dir
// (a detached container keeps its stdio open: a pipe would never close).
func (r *RawRunsc) runsc(ctx context.Context, dir, root string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := os.CreateTemp(dir, "out-")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	full := append([]string{"--root", root, "--network=none", "--platform=" + gvisor.DefaultPlatform,
		"--overlay2=none", "--shared-root=" + gvisor.DefaultSharedRoot}, args...)
	cmd := exec.CommandContext(ctx, r.Runsc, full...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		out.Seek(0, io.SeekStart)
		msg, _ := io.ReadAll(io.LimitReader(out, 2048))
		return fmt.Errorf("runsc %s: %w: %s", args[0], err, strings.TrimSpace(string(msg)))
	}
	return nil
}

// rawBundle writes an OCI bundle in dir that runs args on rootfs,
// read-only, with /proc and no network.
func rawBundle(dir, rootfs string, args ...string) (string, error) {
	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{Args: args, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/"},
		Root:    &specs.Root{Path: rootfs, Readonly: true},
		Mounts:  []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{
			{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
			{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
		}},
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600)
}

// BusyboxRootFS makes, under dir, a root filesystem of the host's static
// busybox as /bin/true and /bin/sleep: the raw figures' fallback when the
// daemon's image store is not at hand. It fails when busybox is missing or
// is not static.
func BusyboxRootFS(dir string) (string, error) {
	src, err := exec.LookPath("busybox")
	if err != nil {
		return "", fmt.Errorf("no image store and no busybox on this host")
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	if !isStatic(data) {
		return "", fmt.Errorf("no image store, and %s is not statically linked", src)
	}
	rootfs := filepath.Join(dir, "rootfs")
	bin := filepath.Join(rootfs, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), data, 0o755); err != nil {
		return "", err
	}
	for _, name := range []string{"true", "sleep"} {
		if err := os.Symlink("busybox", filepath.Join(bin, name)); err != nil {
			return "", err
		}
	}
	return rootfs, nil
}

// isStatic reports whether the ELF image asks for no interpreter (no
// PT_INTERP program header), so that it runs on a root with no libc.
func isStatic(data []byte) bool {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}
