package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/lightbearco/tupper/internal/progress"
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

// TestImageProgressLines pulls from a registry on loopback with the
// progress going to a pipe, as a script sees it: every line is a
// progress line of the documented form, and they tell the layers' bytes,
// each layer finished and the image's id; --json says the same as JSON
// lines on standard output.
func TestImageProgressLines(t *testing.T) {
	testutil.RequiresRoot(t)
	tupper, _ := e2eBinaries(t)
	root := t.TempDir()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	img, err := random.Image(3<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, tag := range []string{"one", "two"} {
		ref, err := name.ParseReference(host+"/progress:"+tag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	var parts []string
	for _, l := range layers {
		size, _ := l.Size()
		d, _ := l.Digest()
		total += size
		parts = append(parts, d.Hex[:12])
	}
	slices.Sort(parts)
	cfgName, _ := img.ConfigName()
	pull := func(args ...string) (string, string) {
		cmd := exec.Command(tupper, append([]string{"--root", root, "image", "pull", "--insecure"}, args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("image pull %v: %v: %s", args, err, stderr.String())
		}
		return stdout.String(), stderr.String()
	}

	ref := host + "/progress:one"
	out, errOut := pull(ref)
	if strings.ContainsAny(errOut, "\r\x1b") {
		t.Errorf("progress into a pipe holds a carriage return or an escape:\n%q", errOut)
	}
	var events []string
	seen := map[string][]string{} // part events by detail
	var downloaded string
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		fields, err := progress.ParseLine(line)
		if err != nil {
			t.Errorf("line %q: %v", line, err)
			continue
		}
		ev, _ := progress.Get(fields, "event")
		if op, _ := progress.Get(fields, "op"); op != "pull" {
			t.Errorf("line %q: op %q, want pull", line, op)
		}
		if item, _ := progress.Get(fields, "item"); item != ref {
			t.Errorf("line %q: item %q, want %s", line, item, ref)
		}
		events = append(events, ev)
		detail, _ := progress.Get(fields, "detail")
		switch ev {
		case progress.EventUpdate:
			if b, _ := progress.Get(fields, "bytes"); detail == "download" {
				downloaded = b
			}
		case progress.EventPart:
			p, _ := progress.Get(fields, "part")
			seen[detail] = append(seen[detail], p)
		case progress.EventDone:
			if res, _ := progress.Get(fields, "result"); res != cfgName.String() {
				t.Errorf("done line %q: result %q, want the image's id %s", line, res, cfgName)
			}
		}
	}
	if len(events) == 0 || events[0] != progress.EventStart || events[len(events)-1] != progress.EventDone {
		t.Errorf("events %v: want a start first and a done last", events)
	}
	if want := fmt.Sprintf("%d/%d", total, total); downloaded != want {
		t.Errorf("the last download update says bytes=%s, want %s (both layers, whole)", downloaded, want)
	}
	for _, detail := range []string{"download", "unpack"} {
		slices.Sort(seen[detail])
		if !slices.Equal(seen[detail], parts) {
			t.Errorf("%s parts %v, want the layers %v", detail, seen[detail], parts)
		}
	}
	if !strings.HasPrefix(out, ref+" ") {
		t.Errorf("stdout %q, want the image's name and id", out)
	}

	// The same image under another tag: every layer is there already.
	out, errOut = pull("--json", host+"/progress:two")
	if errOut != "" {
		t.Errorf("--json wrote to standard error: %q", errOut)
	}
	var recs []progress.Record
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r progress.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Type != progress.RecordType {
			t.Fatalf("--json line %q: %v (type %q)", line, err, r.Type)
		}
		recs = append(recs, r)
	}
	present := 0
	for _, r := range recs {
		if r.Event == progress.EventPart && r.Message == "already present" {
			present++
		}
	}
	last := recs[len(recs)-1]
	if present != len(layers) || last.Event != progress.EventDone || last.Result != cfgName.String() {
		t.Errorf("--json: %d layers already present (want %d), last record %+v (want done with the id)", present, len(layers), last)
	}
}
