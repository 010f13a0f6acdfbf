package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/server"
)

// TestVolumeCommands runs `tupper volume create, ls, put, cat, ls-files
// and rm` against the real server and engine (on the fake backend, with
// real volumes): names and ids both name a volume, and errors say what to
// do.
func TestVolumeCommands(t *testing.T) {
	testutil.RequiresRoot(t)
	clearAPIEnv(t)
	ctx := context.Background()
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(ctx, engine.Config{
		Root: filepath.Join(dir, "engine"), Backend: backendtest.NewFake(), BackendName: "fake",
		Images: stubImages{dir}, AgentPath: exe,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	t.Cleanup(func() {
		vols, _ := eng.ListVolumes(ctx)
		for _, v := range vols {
			eng.DeleteVolume(ctx, v.ID)
		}
	})
	keys, err := auth.Open(filepath.Join(dir, "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	key, _, err := keys.Create(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Engine: eng, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	api := apiOptions{url: hs.URL, key: key}

	var stdout, stderr bytes.Buffer
	g := &globals{stdout: &stdout, stderr: &stderr}
	run := func(stdin string, f func() error) error {
		stdout.Reset()
		stderr.Reset()
		g.stdin = strings.NewReader(stdin)
		return f()
	}

	o := &volumeCreateOptions{api: api, name: "data"}
	o.size.Set("64M")
	if err := run("", func() error { return runVolumeCreate(ctx, g, o) }); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(stdout.String())
	if v, err := eng.GetVolume(ctx, id); err != nil || v.Name != "data" || v.SizeBytes != 64<<20 {
		t.Fatalf("create printed %q: %+v, %v", id, v, err)
	}
	if err := run("", func() error { return runVolumeLs(ctx, g, &volumeLsOptions{api: api, json: true}) }); err != nil {
		t.Fatal(err)
	}
	var list []volumeJSON
	if err := json.Unmarshal(stdout.Bytes(), &list); err != nil || len(list) != 1 || list[0].VolumeID != id || list[0].SizeMB != 64 {
		t.Errorf("ls --json: %s (%v)", stdout.String(), err)
	}

	if err := run("from stdin", func() error {
		return runVolumePut(ctx, g, &volumePutOptions{api: api, volume: "data", path: "/in/a.txt", from: "-"})
	}); err != nil {
		t.Fatal(err)
	}
	if err := run("", func() error { return runVolumeCat(ctx, g, &volumeCatOptions{api: api, volume: id, path: "/in/a.txt"}) }); err != nil || stdout.String() != "from stdin" {
		t.Errorf("cat by id: %q, %v", stdout.String(), err)
	}
	if err := run("", func() error {
		return runVolumeLsFiles(ctx, g, &volumeLsFilesOptions{api: api, volume: "data", path: "/", depth: 2})
	}); err != nil {
		t.Fatal(err)
	}
	if out := stdout.String(); !strings.Contains(out, "/in/\n") || !strings.Contains(out, "/in/a.txt\n") || !strings.Contains(out, "-rw-r--r--") {
		t.Errorf("ls-files:\n%s", out)
	}
	err = run("", func() error { return runVolumeCat(ctx, g, &volumeCatOptions{api: api, volume: "data", path: "/nope"}) })
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("cat of a missing file: %v", err)
	}
	err = run("", func() error { return runVolumeCat(ctx, g, &volumeCatOptions{api: api, volume: "nope", path: "/a"}) })
	if err == nil || !strings.Contains(err.Error(), "tupper volume ls") {
		t.Errorf("cat of a missing volume: %v", err)
	}
	big := strings.Repeat("x", 80<<20)
	err = run(big, func() error {
		return runVolumePut(ctx, g, &volumePutOptions{api: api, volume: "data", path: "/big", from: "-"})
	})
	if err == nil || !strings.Contains(err.Error(), "is full") {
		t.Errorf("put past the size: %v", err)
	}

	// In use, it stays.
	sb, err := eng.Create(ctx, engine.CreateOptions{VolumeMounts: []engine.VolumeMount{{Name: "data", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	err = run("", func() error { return runEach(ctx, g, &api, volumeRmSpec(), []string{"data"}) })
	var exit *exitError
	if !errors.As(err, &exit) || !strings.Contains(stderr.String(), sb.ID) {
		t.Errorf("rm of a mounted volume: %v, stderr %q; want a failure naming %s", err, stderr.String(), sb.ID)
	}
	if err := eng.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := run("", func() error { return runEach(ctx, g, &api, volumeRmSpec(), []string{"data"}) }); err != nil {
		t.Errorf("rm: %v %s", err, stderr.String())
	}
	if list, _ := eng.ListVolumes(ctx); len(list) != 0 {
		t.Errorf("volumes after rm: %v", list)
	}
}
