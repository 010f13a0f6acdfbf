package engine

import (
	"context"
	"fmt"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
)

// LabelTeam is the image label naming the team an image belongs to. The
// images that templates built through the API make (package template)
// carry it; the images an operator adds (pulled, built, imported) do not,
// and every team may start from those. An image of one team is another
// team's to start from no more than its sandboxes are: it holds what the
// team's build put in it (files it copied, secrets its steps fetched).
const LabelTeam = "dev.tupper.team"

// ImageTeam returns the team img belongs to, or "" when it is every
// team's.
func ImageTeam(img *image.Image) string { return img.Config.Labels[LabelTeam] }

// checkImageTeam fails with errdefs.ErrNotFound when img, which ref
// named, belongs to a team other than the scope's of ctx. Calls without a
// scope (the operator's, the daemon's own) may use any image.
func checkImageTeam(ctx context.Context, ref string, img *image.Image) error {
	s, ok := ScopeFrom(ctx)
	if !ok {
		return nil
	}
	if team := ImageTeam(img); team != "" && team != s.Team {
		return fmt.Errorf("template %q: %w", ref, errdefs.ErrNotFound)
	}
	return nil
}
