package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
)

// namedImages holds a fixed set of images by name, as a store would.
type namedImages map[string]*image.Image

func (n namedImages) Resolve(_ context.Context, name string) (*image.Image, error) {
	if img, ok := n[name]; ok {
		return img, nil
	}
	return nil, fmt.Errorf("image %q: %w", name, errdefs.ErrNotFound)
}

// TestCodeInterpreterTemplate: E2B's code-interpreter SDK asks for
// code-interpreter-v1; the engine finds the code-interpreter image, and
// because its label says so, tells the agent to serve the interpreter and
// records the port for the daemon.
func TestCodeInterpreterTemplate(t *testing.T) {
	b := backendtest.NewFake()
	imgs := namedImages{
		image.BaseTemplate: {ID: "sha256:base", RootFS: t.TempDir()},
		image.CodeInterpreterTemplate: {ID: "sha256:ci", RootFS: t.TempDir(), Config: image.ImageConfig{
			Labels: map[string]string{image.LabelCodeInterpreter: "49999"},
		}},
	}
	e := newEngineOn(t, b, func(c *Config) { c.Images = imgs })
	ctx := context.Background()

	sb, err := e.Create(ctx, CreateOptions{Template: "code-interpreter-v1"})
	if err != nil {
		t.Fatalf("create from code-interpreter-v1: %v", err)
	}
	if sb.ImageID != "sha256:ci" || sb.CodeInterpreterPort != 49999 || sb.TemplateID != "code-interpreter-v1" {
		t.Fatalf("record: image %s, port %d, template %s", sb.ImageID, sb.CodeInterpreterPort, sb.TemplateID)
	}
	if args := b.Spec(sb.ID).Agent.Args; !slices.Contains(args, "--code-interpreter") || args[len(args)-1] != ":49999" {
		t.Fatalf("agent args %q: want --code-interpreter :49999", args)
	}
	got, err := e.Get(ctx, sb.ID)
	if err != nil || got.CodeInterpreterPort != 49999 {
		t.Fatalf("stored record: %+v, %v", got, err)
	}

	plain, err := e.Create(ctx, CreateOptions{Template: image.BaseTemplate})
	if err != nil {
		t.Fatal(err)
	}
	if plain.CodeInterpreterPort != 0 || slices.Contains(b.Spec(plain.ID).Agent.Args, "--code-interpreter") {
		t.Fatalf("a base sandbox serves the interpreter: port %d, args %q", plain.CodeInterpreterPort, b.Spec(plain.ID).Agent.Args)
	}

	// An image named directly gets no alias.
	if _, err := e.Create(ctx, CreateOptions{Image: "code-interpreter-v1"}); !errdefs.IsNotFound(err) {
		t.Fatalf("create from image code-interpreter-v1: %v, want not found", err)
	}
}
