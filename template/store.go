// Package template builds sandbox templates as E2B's template API
// describes them (Template().fromImage(…).runCmd(…).copy(…), then
// Template.build): each build runs its steps in a sandbox, commits each
// step as a layer of a new image in the image store, reuses the images of
// an unchanged prefix of steps from earlier builds, and names the result
// so that creates find it by the template's name.
package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/atomicfile"
)

// Build states, as E2B names them.
const (
	StatusWaiting  = "waiting"
	StatusBuilding = "building"
	StatusReady    = "ready"
	StatusError    = "error"
)

// Template is a named template and its builds.
type Template struct {
	ID   string `json:"id"`
	Team string `json:"team"`
	// Names are what creates name the template by (E2B's aliases).
	Names []string `json:"names"`
	// Tags map a tag of the template ("default", "v1") to the build it
	// names.
	Tags     map[string]string `json:"tags"`
	CPUs     float64           `json:"cpus,omitempty"`
	MemoryMB int               `json:"memoryMB,omitempty"`
	// Builds are the template's builds, oldest first.
	Builds    []*Build  `json:"builds"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Build is one build of a template.
type Build struct {
	ID         string    `json:"id"`
	Status     string    `json:"status"`
	CreatedAt  time.Time `json:"createdAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Logs are the build's log lines in Builder.Status's answer; the
	// catalog keeps none (see buildLogs); catalogs written before kept
	// them here.
	Logs   []LogEntry `json:"logs,omitempty"`
	Reason *Reason    `json:"reason,omitempty"`
	// Image is the id of the image the build made, once ready.
	Image string `json:"image,omitempty"`
	// Tags the build was requested with; CachedSteps how many of its
	// steps came from earlier builds.
	Tags        []string `json:"tags,omitempty"`
	CachedSteps int      `json:"cachedSteps,omitempty"`
	Steps       int      `json:"steps,omitempty"`
}

// LogEntry is one line of a build's log.
type LogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
}

// Reason says why a build failed, and at which step ("1" for the first,
// "base" for the base image, "finalize" for the check of the result).
type Reason struct {
	Message string `json:"message"`
	Step    string `json:"step,omitempty"`
}

// catalog keeps the templates in one JSON file, rewritten whole on every
// change (templates are few; a build's log is bounded).
type catalog struct {
	path string
	mu   sync.Mutex
	byID map[string]*Template
}

func openCatalog(path string) (*catalog, error) {
	c := &catalog{path: path, byID: map[string]*Template{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	var list []*Template
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("templates %s: %w", path, err)
	}
	for _, t := range list {
		c.byID[t.ID] = t
		// A build that was running when the daemon stopped ran no more.
		for _, b := range t.Builds {
			if b.Status == StatusBuilding || b.Status == StatusWaiting {
				b.Status, b.FinishedAt = StatusError, time.Now().UTC()
				b.Reason = &Reason{Message: "the daemon stopped during the build: build again"}
			}
		}
	}
	return c, nil
}

// moveLogs moves the logs that a catalog written before buildLogs holds
// into their files, and saves it without them.
func (c *catalog) moveLogs(logs *buildLogs) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	moved := false
	for _, t := range c.byID {
		for _, b := range t.Builds {
			if len(b.Logs) == 0 {
				continue
			}
			if err := logs.add(b.ID, b.Logs); err != nil {
				return err
			}
			b.Logs, moved = nil, true
		}
	}
	if !moved {
		return nil
	}
	return c.saveLocked()
}

// saveLocked writes the catalog; the caller holds mu.
func (c *catalog) saveLocked() error {
	list := make([]*Template, 0, len(c.byID))
	for _, t := range c.byID {
		list = append(list, t)
	}
	slices.SortFunc(list, func(a, b *Template) int { return a.CreatedAt.Compare(b.CreatedAt) })
	data, err := json.Marshal(list)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(c.path, data, 0o600)
}

// update changes the catalog with fn under its lock and saves it.
func (c *catalog) update(fn func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := fn(); err != nil {
		return err
	}
	return c.saveLocked()
}

// find returns the template that ref names (an id or a name), of team when
// team is set; the caller holds mu.
func (c *catalog) findLocked(team, ref string) (*Template, error) {
	if t, ok := c.byID[ref]; ok && (team == "" || t.Team == team) {
		return t, nil
	}
	name, _ := splitTag(ref)
	for _, t := range c.byID {
		if slices.Contains(t.Names, name) && (team == "" || t.Team == team) {
			return t, nil
		}
	}
	return nil, fmt.Errorf("template %q: %w", ref, errdefs.ErrNotFound)
}

// snapshot returns a deep copy of t, for callers outside the lock.
func (t *Template) snapshot() *Template {
	data, _ := json.Marshal(t)
	var out Template
	json.Unmarshal(data, &out)
	return &out
}

// buildOf returns build id of t.
func (t *Template) buildOf(id string) (*Build, error) {
	for _, b := range t.Builds {
		if b.ID == id {
			return b, nil
		}
	}
	return nil, fmt.Errorf("build %q of template %s: %w", id, t.ID, errdefs.ErrNotFound)
}
