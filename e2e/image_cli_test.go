package e2e

import (
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestImageCLI drives `tupper image` through the real binary: pull from a
// registry on loopback, import a `docker save` tarball, list, remove.
func TestImageCLI(t *testing.T) {
	testutil.RequiresRoot(t)
	tupper, _ := e2eBinaries(t)
	root := t.TempDir()
	tupperCmd := func(args ...string) (string, string, error) {
		cmd := exec.Command(tupper, append([]string{"--root", root}, args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	names := func() []string {
		out, stderr, err := tupperCmd("image", "ls", "--json")
		if err != nil {
			t.Fatalf("image ls: %v: %s", err, stderr)
		}
		var rows []struct{ Names []string }
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("image ls --json printed %q: %v", out, err)
		}
		var all []string
		for _, r := range rows {
			all = append(all, r.Names...)
		}
		slices.Sort(all)
		return all
	}

	// A registry on loopback holding a random two-layer image.
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	img, err := random.Image(1<<16, 2)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	ref, err := name.ParseReference(host+"/tools:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}

	if _, stderr, err := tupperCmd("image", "pull", "--insecure", host+"/tools:1"); err != nil {
		t.Fatalf("image pull: %v: %s", err, stderr)
	} else if !strings.Contains(stderr, "download") && !strings.Contains(stderr, "pull") {
		t.Errorf("image pull showed no progress: %q", stderr)
	}

	tarPath := filepath.Join(t.TempDir(), "saved.tar")
	savedRef, _ := name.ParseReference("saved/app:2")
	if err := tarball.WriteToFile(tarPath, savedRef, img); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := tupperCmd("image", "import", tarPath, "--name", "app"); err != nil {
		t.Fatalf("image import: %v: %s", err, stderr)
	}
	want := []string{"app", host + "/tools:1"}
	slices.Sort(want)
	if got := names(); !slices.Equal(got, want) {
		t.Errorf("image ls after pull and import = %v, want %v", got, want)
	}

	var out string
	if _, stderr, err := tupperCmd("image", "rm", "app"); err != nil {
		t.Fatalf("image rm: %v: %s", err, stderr)
	}
	if got, want := names(), []string{host + "/tools:1"}; !slices.Equal(got, want) {
		t.Errorf("image ls after rm = %v, want %v", got, want)
	}
	_, stderr, err := tupperCmd("image", "rm", "no-such-image")
	if err == nil || !strings.Contains(stderr, "no-such-image") {
		t.Errorf("image rm of an unknown name: %v, %q; want an error naming it", err, stderr)
	}
	// A one-shot sandbox from an image with no bash: the agent falls back
	// to sh, and `tupper run` exits with the command's code.
	bbTar := filepath.Join(t.TempDir(), "busybox.tar")
	writeRootFSImage(t, testutil.BusyboxRootFS(t), bbTar, "busybox:test")
	if _, stderr, err := tupperCmd("image", "import", bbTar); err != nil {
		t.Fatalf("import busybox: %v: %s", err, stderr)
	}
	testutil.RequiresRunsc(t)
	out, stderr, err = tupperCmd("run", "--image", "busybox:test", "--", "sh", "-c", "echo hi from $(id -un); echo oops >&2; exit 7")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Errorf("tupper run: %v (stderr %q), want exit code 7", err, stderr)
	}
	if out != "hi from user\n" || !strings.Contains(stderr, "oops") {
		t.Errorf("tupper run printed %q and %q", out, stderr)
	}

	_, stderr, err = tupperCmd("image", "build", "custom")
	if err == nil || !strings.Contains(stderr, "--package") {
		t.Errorf("image build with no packages: %v, %q; want an error saying to name packages", err, stderr)
	}
}

// writeRootFSImage packs the directory rootfs as a one-layer image named ref
// into a `docker save` tarball at path.
func writeRootFSImage(t *testing.T, rootfs, path, ref string) {
	t.Helper()
	layerTar := filepath.Join(t.TempDir(), "layer.tar")
	if out, err := exec.Command("tar", "-C", rootfs, "-cf", layerTar, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar %s: %v: %s", rootfs, err, out)
	}
	layer, err := tarball.LayerFromFile(layerTar)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
}
