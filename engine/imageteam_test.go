package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
)

// TestImageTeam checks that a sandbox starts from an image labelled as a
// team's only for that team (or the operator, without a scope), by any
// name of it, as template or as image, and that an image without the
// label is every team's.
func TestImageTeam(t *testing.T) {
	blueImg := &image.Image{ID: "sha256:blue", RootFS: t.TempDir(), Config: image.ImageConfig{Labels: map[string]string{LabelTeam: "blue"}}}
	imgs := namedImages{
		image.BaseTemplate: {ID: "sha256:base", RootFS: t.TempDir()},
		"blue-tpl":         blueImg,
		"tplblue":          blueImg,
	}
	e := newEngineOn(t, backendtest.NewFake(), func(c *Config) { c.Images = imgs })
	bg := context.Background()
	blue := WithScope(bg, Scope{Team: "blue", Key: "key_b"})
	red := WithScope(bg, Scope{Team: "red", Key: "key_r"})

	for _, tt := range []struct {
		name string
		ctx  context.Context
		opts CreateOptions
		ok   bool
	}{
		{name: "the team, by name", ctx: blue, opts: CreateOptions{Template: "blue-tpl"}, ok: true},
		{name: "the team, by id", ctx: blue, opts: CreateOptions{Template: "tplblue"}, ok: true},
		{name: "another team, by name", ctx: red, opts: CreateOptions{Template: "blue-tpl"}},
		{name: "another team, by id", ctx: red, opts: CreateOptions{Template: "tplblue"}},
		{name: "another team, as an image", ctx: red, opts: CreateOptions{Image: "blue-tpl"}},
		{name: "the operator", ctx: bg, opts: CreateOptions{Template: "blue-tpl"}, ok: true},
		{name: "an image of every team's", ctx: red, opts: CreateOptions{Template: image.BaseTemplate}, ok: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sb, err := e.Create(tt.ctx, tt.opts)
			if tt.ok {
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				e.Kill(tt.ctx, sb.ID)
				return
			}
			if !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("create: %v, want not found", err)
			}
		})
	}
}
