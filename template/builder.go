package template

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/sdk"
)

// Config configures a Builder.
type Config struct {
	// Root keeps the catalog of templates and the files uploaded for
	// builds.
	Root string
	// Engine runs the build sandboxes and exports their changes; Images
	// keeps what builds make; Sandboxes is a client of the same engine
	// (its commands and files) — local.Runtime's.
	Engine    *engine.Engine
	Images    *image.Store
	Sandboxes *sdk.Client
	// Network is the egress policy of build sandboxes (apt, pip and npm
	// installs need some); nil means the engine's default.
	Network *netpolicy.Policy
	// MaxUploadBytes bounds one uploaded file archive; zero means 1 GiB.
	// MaxTeamUploadBytes bounds what a team's uploads keep on the disk
	// together; zero means 8 GiB.
	MaxUploadBytes     int64
	MaxTeamUploadBytes int64
	// BuildTimeout bounds one build; zero means one hour.
	BuildTimeout time.Duration
	Logger       *slog.Logger
}

// Builder builds templates. It is safe for concurrent use.
type Builder struct {
	cfg     Config
	log     *slog.Logger
	cat     *catalog
	logs    *buildLogs
	uploads string
	// building bounds the builds at once: each runs a sandbox.
	building chan struct{}
	bg       context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New opens the builder's state under cfg.Root.
func New(cfg Config) (*Builder, error) {
	switch {
	case cfg.Root == "", cfg.Engine == nil, cfg.Images == nil, cfg.Sandboxes == nil:
		return nil, fmt.Errorf("template: Root, Engine, Images and Sandboxes are required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = 1 << 30
	}
	if cfg.MaxTeamUploadBytes == 0 {
		cfg.MaxTeamUploadBytes = 8 << 30
	}
	if cfg.BuildTimeout == 0 {
		cfg.BuildTimeout = time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	uploads := filepath.Join(cfg.Root, "uploads")
	if err := os.MkdirAll(uploads, 0o700); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	cat, err := openCatalog(filepath.Join(cfg.Root, "templates.json"))
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	logs, err := newBuildLogs(filepath.Join(cfg.Root, "logs"))
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	if err := cat.moveLogs(logs); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	bg, cancel := context.WithCancel(context.Background())
	return &Builder{
		cfg: cfg, log: cfg.Logger.With("component", "template"), cat: cat, logs: logs, uploads: uploads,
		building: make(chan struct{}, 2), bg: bg, cancel: cancel,
	}, nil
}

// Close stops the builds under way (they end as failed) and waits for
// them.
func (b *Builder) Close() error {
	b.cancel()
	b.wg.Wait()
	return nil
}

// nameRE is what a template name may be: an image name's last part.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$`)

// splitTag splits "name:tag" into its parts; no tag means "default".
func splitTag(ref string) (name, tag string) {
	name, tag, ok := strings.Cut(ref, ":")
	if !ok || tag == "" {
		tag = "default"
	}
	return name, tag
}

// Request is what POST /v3/templates asks for: a template (made, or found
// by its name) and a build of it to come.
type Request struct {
	// Team owns the template.
	Team string
	// Name is "name" or "name:tag"; Tags are more tags for the build.
	Name     string
	Tags     []string
	CPUs     float64
	MemoryMB int
}

// RequestBuild finds or makes the template req names and adds a build of
// it, waiting for its steps (StartBuild).
func (b *Builder) RequestBuild(ctx context.Context, req Request) (*Template, *Build, error) {
	name, tag := splitTag(strings.ToLower(req.Name))
	if !nameRE.MatchString(name) {
		return nil, nil, fmt.Errorf("template name %q: use 1 to 128 lowercase letters, digits, '.', '_' and '-': %w", req.Name, errdefs.ErrInvalidArgument)
	}
	tags := append([]string{tag}, req.Tags...)
	for _, t := range tags {
		if !nameRE.MatchString(t) {
			return nil, nil, fmt.Errorf("tag %q: use lowercase letters, digits, '.', '_' and '-': %w", t, errdefs.ErrInvalidArgument)
		}
	}
	if req.CPUs < 0 || req.MemoryMB < 0 {
		return nil, nil, fmt.Errorf("cpuCount and memoryMB must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	// Checked before the catalog's lock is taken (the image store may be
	// slow to answer), and used only when the template is new.
	nameErr := b.checkNewName(ctx, req.Team, name)
	var out *Template
	var build *Build
	var dropped []string
	err := b.cat.update(func() error {
		t, err := b.cat.findLocked("", name)
		switch {
		case errdefs.IsNotFound(err):
			if nameErr != nil {
				return nameErr
			}
			if err := b.cat.checkTemplateCountLocked(req.Team); err != nil {
				return err
			}
			now := time.Now().UTC()
			t = &Template{ID: newID("tpl"), Team: req.Team, Names: []string{name}, Tags: map[string]string{}, CreatedAt: now}
			b.cat.byID[t.ID] = t
		case err != nil:
			return err
		case t.Team != req.Team:
			return fmt.Errorf("template name %q belongs to another team: %w", name, errdefs.ErrAlreadyExists)
		}
		if req.CPUs > 0 {
			t.CPUs = req.CPUs
		}
		if req.MemoryMB > 0 {
			t.MemoryMB = req.MemoryMB
		}
		build = &Build{ID: newID("bld"), Status: StatusWaiting, CreatedAt: time.Now().UTC(), Tags: slices.Compact(tags)}
		t.Builds = append(t.Builds, build)
		dropped = pruneBuilds(t)
		t.UpdatedAt = build.CreatedAt
		out = t.snapshot()
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	b.logs.remove(dropped...)
	return out, build, nil
}

// checkNewName fails with errdefs.ErrAlreadyExists when a new template
// may not be named name: its builds would take over a name that the
// daemon's templates and images have, which every team's sandboxes start
// from ("base" first of all), or will have (the templates Tupper builds
// by name, and their aliases). An image of team's own that a template
// once named (one the catalog lost, or a daemon sharing its image store
// made) may be named again.
func (b *Builder) checkNewName(ctx context.Context, team, name string) error {
	_, recipe := image.Recipes[name]
	_, alias := image.TemplateAliases[name]
	img, rerr := b.cfg.Images.Resolve(ctx, name)
	ours := rerr == nil && team != "" && engine.ImageTeam(img) == team
	if recipe || alias || rerr == nil && !ours {
		return fmt.Errorf("template name %q is the name of one of the daemon's templates or images: choose another: %w", name, errdefs.ErrAlreadyExists)
	}
	if !errdefs.IsNotFound(rerr) {
		return rerr
	}
	return nil
}

// Get returns the template ref names (an id or a name), of team when team
// is set.
func (b *Builder) Get(team, ref string) (*Template, error) {
	b.cat.mu.Lock()
	defer b.cat.mu.Unlock()
	t, err := b.cat.findLocked(team, ref)
	if err != nil {
		return nil, err
	}
	return t.snapshot(), nil
}

// List returns the templates of team (every team's when empty), oldest
// first.
func (b *Builder) List(team string) []*Template {
	b.cat.mu.Lock()
	defer b.cat.mu.Unlock()
	var out []*Template
	for _, t := range b.cat.byID {
		if team == "" || t.Team == team {
			out = append(out, t.snapshot())
		}
	}
	slices.SortFunc(out, func(a, c *Template) int { return a.CreatedAt.Compare(c.CreatedAt) })
	return out
}

// Delete removes the template ref names and the names of its images;
// sandboxes that run on them run on (the image store keeps what they
// lease).
func (b *Builder) Delete(ctx context.Context, team, ref string) error {
	var names, builds []string
	err := b.cat.update(func() error {
		t, err := b.cat.findLocked(team, ref)
		if err != nil {
			return err
		}
		names = imageNames(t)
		for _, bd := range t.Builds {
			builds = append(builds, bd.ID)
		}
		delete(b.cat.byID, t.ID)
		return nil
	})
	if err != nil {
		return err
	}
	b.logs.remove(builds...)
	for _, n := range names {
		if err := b.cfg.Images.Remove(ctx, n); err != nil && !errdefs.IsNotFound(err) {
			b.log.Warn("remove the image of a deleted template", "image", n, "err", err)
		}
	}
	return nil
}

// imageNames are the image names a template's builds are found by: its
// id, and each name with each tag ("default" is the image name's
// "latest").
func imageNames(t *Template) []string {
	out := []string{t.ID}
	for _, n := range t.Names {
		for tag := range t.Tags {
			if tag == "default" {
				out = append(out, n)
			} else {
				out = append(out, n+":"+tag)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// UploadPath returns where team's file archive of hash is kept, and
// whether it is there.
//
// Each team has uploads of its own. E2B's hash is of the files and their
// destination, computed by the client: the daemon cannot check that an
// archive matches it. Shared between teams, a hash that one team's client
// computes (the files of a public project are known to all) would let
// another team upload other files under it first, which the first team's
// build would then take as its own; and whether a hash is there would
// tell one team what files another has.
func (b *Builder) UploadPath(team, hash string) (string, bool, error) {
	if len(hash) != 64 || strings.Trim(strings.ToLower(hash), "0123456789abcdef") != "" {
		return "", false, fmt.Errorf("files hash %q is not a sha256 in hex: %w", hash, errdefs.ErrInvalidArgument)
	}
	p := filepath.Join(b.teamUploads(team), strings.ToLower(hash)+".tar")
	_, err := os.Stat(p)
	return p, err == nil, nil
}

// teamUploads is the directory of team's uploads, named by a digest of
// the team so that no team name, whoever chose it, is a path.
func (b *Builder) teamUploads(team string) string {
	sum := sha256.Sum256([]byte(team))
	return filepath.Join(b.uploads, "team-"+hex.EncodeToString(sum[:12]))
}

// PutUpload keeps the archive r (a tar, gzipped or not) as team's files
// of hash. E2B's hash is of the files and their destination, not of the
// archive's bytes: it is taken as given, for team's builds alone (see
// UploadPath).
func (b *Builder) PutUpload(team, hash string, r io.Reader) (retErr error) {
	p, _, err := b.UploadPath(team, hash)
	if err != nil {
		return err
	}
	defer func() {
		// Said as the engine says it of creates (503, what to do),
		// rather than as an internal error.
		if errors.Is(retErr, syscall.ENOSPC) || errors.Is(retErr, syscall.EDQUOT) {
			retErr = fmt.Errorf("file archive %.12s: the host's disk is full (the disk of %s: %v): free space on it and retry: %w", hash, b.cfg.Root, retErr, errdefs.ErrUnavailable)
		}
	}()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	// What the team keeps besides: its uploads that builds no longer
	// ask for go first.
	room := b.cfg.MaxTeamUploadBytes - sweepUploads(filepath.Dir(p))
	if room <= 0 {
		return fmt.Errorf("the team's uploaded files take %d bytes, the most they may: they are removed %v after a build last asked for them: %w", b.cfg.MaxTeamUploadBytes, uploadTTL, errdefs.ErrFailedPrecondition)
	}
	f, err := os.CreateTemp(filepath.Dir(p), "upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(r, min(b.cfg.MaxUploadBytes, room)+1))
	switch {
	case err != nil:
	case n > b.cfg.MaxUploadBytes:
		err = fmt.Errorf("file archive is over %d bytes: %w", b.cfg.MaxUploadBytes, errdefs.ErrInvalidArgument)
	case n > room:
		err = fmt.Errorf("file archive does not fit in the %d bytes the team's uploaded files may take (they are removed %v after a build last asked for them): %w", b.cfg.MaxTeamUploadBytes, uploadTTL, errdefs.ErrFailedPrecondition)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// Status returns build buildID of template templateID, with its log from
// entry offset on.
func (b *Builder) Status(team, templateID, buildID string, offset int) (*Build, error) {
	b.cat.mu.Lock()
	t, err := b.cat.findLocked(team, templateID)
	var bd *Build
	if err == nil {
		bd, err = t.buildOf(buildID)
	}
	if err != nil {
		b.cat.mu.Unlock()
		return nil, err
	}
	out := *bd
	if bd.Reason != nil {
		r := *bd.Reason
		out.Reason = &r
	}
	b.cat.mu.Unlock()
	// Read outside the catalog's lock: the log is the build's file.
	if out.Logs, err = b.logs.read(out.ID, max(offset, 0)); err != nil {
		return nil, fmt.Errorf("build %s: its log: %w", out.ID, err)
	}
	return &out, nil
}

// AssignTags points tags at the newest ready build of target ("name" or
// "name:tag", whose build it takes), and returns that build.
func (b *Builder) AssignTags(ctx context.Context, team, target string, tags []string) (*Build, error) {
	for _, t := range tags {
		if !nameRE.MatchString(t) {
			return nil, fmt.Errorf("tag %q: use lowercase letters, digits, '.', '_' and '-': %w", t, errdefs.ErrInvalidArgument)
		}
	}
	name, tag := splitTag(target)
	var build *Build
	var tpl *Template
	err := b.cat.update(func() error {
		t, err := b.cat.findLocked(team, name)
		if err != nil {
			return err
		}
		id, ok := t.Tags[tag]
		if !ok {
			return fmt.Errorf("template %s has no tag %q: %w", name, tag, errdefs.ErrNotFound)
		}
		bd, err := t.buildOf(id)
		if err != nil {
			return err
		}
		for _, tg := range tags {
			t.Tags[tg] = bd.ID
		}
		build, tpl = bd, t.snapshot()
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, n := range imageNames(tpl) {
		if tpl.Tags[tagOfName(n)] == build.ID {
			if err := b.cfg.Images.Tag(ctx, build.Image, n); err != nil {
				return nil, err
			}
		}
	}
	return build, nil
}

// RemoveTags removes tags of template name (its "default" tag stays).
func (b *Builder) RemoveTags(ctx context.Context, team, name string, tags []string) error {
	var drop []string
	err := b.cat.update(func() error {
		t, err := b.cat.findLocked(team, name)
		if err != nil {
			return err
		}
		for _, tg := range tags {
			if tg == "default" {
				return fmt.Errorf("the default tag of a template cannot be removed: delete the template: %w", errdefs.ErrInvalidArgument)
			}
			if _, ok := t.Tags[tg]; !ok {
				return fmt.Errorf("template %s has no tag %q: %w", name, tg, errdefs.ErrNotFound)
			}
			delete(t.Tags, tg)
			for _, n := range t.Names {
				drop = append(drop, n+":"+tg)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, n := range drop {
		if err := b.cfg.Images.Remove(ctx, n); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// tagOfName is the template tag an image name stands for.
func tagOfName(n string) string {
	if _, tag, ok := strings.Cut(n, ":"); ok {
		return tag
	}
	return "default"
}

// logf adds a line to build bd of template id's log.
func (b *Builder) logf(id, buildID, level, format string, args ...any) {
	b.cat.mu.Lock()
	t, ok := b.cat.byID[id]
	if ok {
		_, err := t.buildOf(buildID)
		ok = err == nil
	}
	b.cat.mu.Unlock()
	if !ok {
		return // deleted meanwhile
	}
	if err := b.logs.add(buildID, logEntries(level, fmt.Sprintf(format, args...))); err != nil {
		b.log.Warn("write a build's log", "template", id, "build", buildID, "err", err)
	}
}

// setBuild changes build buildID of template id with fn and saves.
func (b *Builder) setBuild(id, buildID string, fn func(t *Template, bd *Build)) error {
	return b.cat.update(func() error {
		t, ok := b.cat.byID[id]
		if !ok {
			return fmt.Errorf("template %s: %w (deleted during its build)", id, errdefs.ErrNotFound)
		}
		bd, err := t.buildOf(buildID)
		if err != nil {
			return err
		}
		fn(t, bd)
		return nil
	})
}

func newID(prefix string) string {
	b := make([]byte, 10)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

var errBuildStarted = errors.New("the build has started already")
