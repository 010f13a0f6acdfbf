package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
)

// agentPackage is the agent's package path within this module.
const agentPackage = "/cmd/tupper-agent"

// FindAgent locates the tupper-agent binary: $TUPPER_AGENT, then beside
// the running executable (as `make build` and the release archives put
// it), then on PATH.
func FindAgent() (string, error) {
	if p := os.Getenv("TUPPER_AGENT"); p != "" {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		for _, name := range []string{"tupper-agent", "tupper-agent-linux-" + runtime.GOARCH} {
			p := filepath.Join(filepath.Dir(exe), name)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	if p, err := exec.LookPath("tupper-agent"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("tupper-agent binary not found beside tupper, on PATH or in $TUPPER_AGENT: %w", errdefs.ErrNotFound)
}

// EnsureAgent returns the agent binary, as FindAgent finds it, or else the
// one built for this tupper's own version into cacheDir. That is how a
// tupper made by `go install github.com/lightbearco/tupper/cmd/tupper@v…`,
// which installs no agent beside it, gets one: the first time, it fetches
// the same version of the module through the Go toolchain (its module
// proxy and checksum database, as the install itself did) and builds the
// agent, static, for Linux on this architecture. Later runs find it there.
func EnsureAgent(ctx context.Context, cacheDir string, log *slog.Logger) (string, error) {
	p, findErr := FindAgent()
	if findErr == nil {
		return p, nil
	}
	mod, version, ok := moduleVersion()
	if !ok {
		return "", fmt.Errorf("%w; this tupper was built from a working tree: run `make build` there, which puts the agent beside it", findErr)
	}
	cached := filepath.Join(cacheDir, "tupper-agent-"+sanitize(version)+"-linux-"+runtime.GOARCH)
	if _, err := os.Stat(cached); err == nil {
		return cached, nil
	}
	if log == nil {
		log = slog.Default()
	}
	log.Info("building the sandbox agent for this tupper's version (once)", "module", mod, "version", version, "into", cached)
	if err := buildAgent(ctx, mod, version, cached); err != nil {
		return "", fmt.Errorf("%w; fetching it for %s@%s failed: %w", findErr, mod, version, err)
	}
	return cached, nil
}

// moduleVersion is the module path and version this binary was built from,
// when it was built from a released (or pseudo-) version of the module
// rather than a working tree.
func moduleVersion() (mod, version string, ok bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok || info.Main.Path == "" {
		return "", "", false
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" || strings.HasSuffix(v, "+dirty") {
		return "", "", false
	}
	return info.Main.Path, v, true
}

// buildAgent downloads mod@version into the Go module cache and builds its
// agent into out (atomically: a half-built file never appears there).
func buildAgent(ctx context.Context, mod, version, out string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the Go toolchain is not on PATH (install Go, or put a tupper-agent from a release archive beside tupper): %w", err)
	}
	dl := exec.CommandContext(ctx, goTool, "mod", "download", "-json", mod+"@"+version)
	dl.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	raw, err := dl.Output()
	var where struct{ Dir, Error string }
	if jerr := json.Unmarshal(raw, &where); jerr != nil || where.Dir == "" {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("go mod download: %s%s", where.Error, exit.Stderr)
		}
		return fmt.Errorf("go mod download: %v %s", err, where.Error)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".building"
	build := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, "."+agentPackage)
	build.Dir = where.Dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOFLAGS=-mod=mod")
	if b, err := build.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("go build %s: %w: %s", mod+agentPackage, err, b)
	}
	return os.Rename(tmp, out)
}

// sanitize makes a version safe in a file name.
func sanitize(v string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == ':' {
			return '_'
		}
		return r
	}, v)
}
