package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
)

// ImageLister is an Images that lists what it holds, for ListImages.
// *image.Store implements it. Without it, ListImages fails with
// errdefs.ErrNotSupported.
type ImageLister interface {
	List(ctx context.Context) ([]*image.Image, error)
}

// ListImages returns the images that the scope of ctx may start
// sandboxes from, newest first: those of every team, and the scope's own
// team's (see ImageTeam). Calls without a scope see every image.
func (e *Engine) ListImages(ctx context.Context) ([]*image.Image, error) {
	l, ok := e.cfg.Images.(ImageLister)
	if !ok {
		return nil, fmt.Errorf("listing images: %w", errdefs.ErrNotSupported)
	}
	all, err := l.List(ctx)
	if err != nil {
		return nil, err
	}
	sc, scoped := ScopeFrom(ctx)
	out := slices.DeleteFunc(slices.Clone(all), func(img *image.Image) bool {
		team := ImageTeam(img)
		return scoped && team != "" && team != sc.Team
	})
	slices.SortStableFunc(out, func(a, b *image.Image) int { return b.Created.Compare(a.Created) })
	return out, nil
}
