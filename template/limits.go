package template

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// What one team keeps and runs through the template API is bounded: the
// catalog is one file, rewritten whole at every change; each build that
// waits for its turn holds its spec, and the builder runs two at once for
// every team together; uploaded files stay on the host's disk. Without
// bounds, one key's loop of requests would slow every team's template
// calls, hold the builder for hours, or fill the disk.
const (
	// MaxTemplatesPerTeam bounds a team's templates.
	MaxTemplatesPerTeam = 500
	// maxBuildsPerTemplate bounds the builds a template keeps: past it,
	// the oldest that no tag names and that is not under way goes.
	maxBuildsPerTemplate = 50
	// MaxPendingBuildsPerTeam bounds a team's builds started and not
	// finished (running, or waiting for their turn); one more is refused
	// as busy, to come back later.
	MaxPendingBuildsPerTeam = 4
	// uploadTTL is how long uploaded files are kept since a build last
	// asked for them: a build needs them only while it runs, and the SDK
	// uploads them again when they are gone.
	uploadTTL = 24 * time.Hour
)

// checkTemplateCountLocked fails unless team may make one more template;
// the caller holds the catalog's lock.
func (c *catalog) checkTemplateCountLocked(team string) error {
	n := 0
	for _, t := range c.byID {
		if t.Team == team {
			n++
		}
	}
	if n >= MaxTemplatesPerTeam {
		return fmt.Errorf("the team has %d templates, the most it may: delete one first: %w", n, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// checkPendingLocked fails, as busy, unless team may start one more
// build; the caller holds the catalog's lock.
func (c *catalog) checkPendingLocked(team string) error {
	n := 0
	for _, t := range c.byID {
		if t.Team != team {
			continue
		}
		for _, bd := range t.Builds {
			if bd.Status == StatusBuilding {
				n++
			}
		}
	}
	if n >= MaxPendingBuildsPerTeam {
		return errdefs.Busy(30*time.Second, "the team has %d builds under way, the most it may: start this one once one of them ends", n)
	}
	return nil
}

// pruneBuilds drops t's oldest builds past maxBuildsPerTemplate that no
// tag names and that are not under way, and returns their ids.
func pruneBuilds(t *Template) (dropped []string) {
	for len(t.Builds) > maxBuildsPerTemplate {
		i := slices.IndexFunc(t.Builds, func(bd *Build) bool {
			if bd.Status == StatusBuilding {
				return false
			}
			for _, id := range t.Tags {
				if id == bd.ID {
					return false
				}
			}
			return true
		})
		if i < 0 {
			return dropped
		}
		dropped = append(dropped, t.Builds[i].ID)
		t.Builds = slices.Delete(t.Builds, i, i+1)
	}
	return dropped
}

// keepUpload marks the uploaded file p as needed now, so that the sweep
// of old uploads leaves it for uploadTTL more.
func keepUpload(p string) {
	now := time.Now()
	os.Chtimes(p, now, now)
}

// sweepUploads removes the files in dir (a team's uploads) that no build
// asked for within uploadTTL, and the temporary files of uploads cut off
// as long ago, and returns the bytes that the rest take.
func sweepUploads(dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var kept int64
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		if time.Since(info.ModTime()) > uploadTTL && (strings.HasSuffix(e.Name(), ".tar") || strings.HasPrefix(e.Name(), "upload-")) {
			os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		kept += info.Size()
	}
	return kept
}
