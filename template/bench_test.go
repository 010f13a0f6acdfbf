package template_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/sdk"
	"github.com/lightbearco/tupper/template"
)

// BenchmarkTemplateBuild builds a template of four steps from the test
// image through the builder, as `Template.build` does through the daemon:
// "cold" runs every step (its first step is new each time), "cached" the
// same steps again, each from the cache (only the final image is made).
func BenchmarkTemplateBuild(b *testing.B) {
	testutil.RequiresRunsc(b)
	storeRoot, base := testutil.TestImage(b)
	root, err := os.MkdirTemp("", "tb-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx := context.Background()
	rt, err := local.Open(ctx, local.Config{Root: root, ImageRoot: storeRoot, AgentPath: testutil.AgentBinary(b), Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Engine().KillAll(context.Background()); rt.Close() })
	bld, err := template.New(template.Config{
		Root: filepath.Join(root, "templates"), Engine: rt.Engine(), Images: rt.Images(), Sandboxes: &sdk.Client{Transport: rt}, Logger: log,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bld.Close() })
	build := func(b *testing.B, name, marker string) {
		t, bd, err := bld.RequestBuild(ctx, template.Request{Team: "default", Name: name})
		if err != nil {
			b.Fatal(err)
		}
		spec := template.Spec{FromImage: base, Steps: []template.Step{
			{Type: "RUN", Args: []string{"echo " + marker + " > /opt/marker", "root"}},
			{Type: "ENV", Args: []string{"MODE", "bench"}},
			{Type: "WORKDIR", Args: []string{"/srv"}},
			{Type: "RUN", Args: []string{"python3 -c 'print(1)' > /srv/out", "root"}},
		}}
		if err := bld.StartBuild(ctx, "default", t.ID, bd.ID, spec); err != nil {
			b.Fatal(err)
		}
		for {
			st, err := bld.Status("default", t.ID, bd.ID, 0)
			if err != nil {
				b.Fatal(err)
			}
			if st.Status == template.StatusReady {
				return
			}
			if st.Status == template.StatusError {
				b.Fatalf("build failed: %+v", st.Reason)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	b.Run("cold", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			build(b, fmt.Sprintf("bench-cold-%d", i), fmt.Sprintf("%d-%d", time.Now().UnixNano(), i))
		}
	})
	b.Run("cached", func(b *testing.B) {
		marker := fmt.Sprint(time.Now().UnixNano())
		build(b, "bench-cached-warm", marker)
		for i := 0; b.Loop(); i++ {
			build(b, fmt.Sprintf("bench-cached-%d", i), marker)
		}
	})
}
