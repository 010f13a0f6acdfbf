package local_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// TestTemplateBuildInProcess builds a template through local.Runtime on
// runsc, with no daemon: a RUN, a COPY from a context directory and a
// WORKDIR on the test image, with a size; a sandbox created by its name
// sees them and has that size; the
// runtime opened again (as a restarted program) still has the template,
// whose rebuild comes from the cache; a failing step is a
// *TemplateBuildError; and it is deleted.
func TestTemplateBuildInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a template in gVisor sandboxes")
	}
	s := newStack(t, engine.Config{})
	_, base := testutil.TestImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello from the context\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("local-template-%d", os.Getpid())
	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	define := func() *sdk.Template {
		tpl := &sdk.Template{ContextDir: dir}
		return tpl.FromImage(base).
			RunCmd("echo in-process > /opt/local-marker # "+runID, "root").
			Copy("hello.txt", "/srv/", "", 0).
			SetWorkdir("/srv")
	}
	cached := func(logs []string) int {
		n := 0
		for _, l := range logs {
			if strings.HasPrefix(l, "CACHED ") {
				n++
			}
		}
		return n
	}
	var logs []string
	onLog := sdk.WithOnBuildLog(func(l sdk.TemplateLogEntry) { logs = append(logs, l.Message) })
	build, err := s.client.BuildTemplate(ctx, define(), name, onLog, sdk.WithBuildCPUs(2), sdk.WithBuildMemoryMB(768))
	if err != nil {
		t.Fatalf("build: %v\n%s", err, strings.Join(logs, "\n"))
	}
	if n := cached(logs); n != 0 {
		t.Errorf("%d steps from the cache in the first build", n)
	}
	sb := s.create(t, sdk.CreateOptions{Template: name})
	if got := run(t, sb, "cat /opt/local-marker /srv/hello.txt; pwd").Stdout; got != "in-process\nhello from the context\n/srv\n" {
		t.Errorf("sandbox of the template: %q", got)
	}
	// The build's size is its sandboxes' default.
	if info, err := s.client.GetInfo(ctx, sb.ID()); err != nil || info.CPUCount != 2 || info.MemoryMB != 768 {
		t.Errorf("sandbox of the template: %+v, %v; want 2 CPUs and 768 MB", info, err)
	}
	sb.Kill(ctx)

	// A program that opens the runtime again finds the template.
	if err := s.rt.Close(); err != nil {
		t.Fatal(err)
	}
	s.open(t)
	if ok, err := s.client.TemplateExists(ctx, name); err != nil || !ok {
		t.Fatalf("TemplateExists after reopening = %v, %v", ok, err)
	}
	logs = nil
	again, err := s.client.BuildTemplate(ctx, define(), name, onLog)
	if err != nil {
		t.Fatal(err)
	}
	if again.TemplateID != build.TemplateID || cached(logs) != 3 {
		t.Errorf("rebuild %+v of %+v, %d steps cached, want the same template and 3:\n%s", again, build, cached(logs), strings.Join(logs, "\n"))
	}
	list, err := s.client.ListTemplates(ctx)
	if err != nil || len(list) != 1 || list[0].TemplateID != build.TemplateID || list[0].BuildCount != 2 || list[0].BuildStatus != sdk.TemplateStatusReady {
		t.Errorf("ListTemplates = %+v, %v", list, err)
	}

	_, err = s.client.BuildTemplate(ctx, sdk.NewTemplate().FromImage(base).RunCmd("exit 7", ""), name+"-bad")
	if !sdk.IsTemplateBuildError(err) || !strings.Contains(err.Error(), "step 1 (RUN exit 7)") {
		t.Errorf("failing build: %v", err)
	}
	for _, n := range []string{name, name + "-bad"} {
		if err := s.client.DeleteTemplate(ctx, n); err != nil {
			t.Errorf("delete %s: %v", n, err)
		}
	}
	if ok, err := s.client.TemplateExists(ctx, name); err != nil || ok {
		t.Errorf("TemplateExists after delete = %v, %v", ok, err)
	}
}
