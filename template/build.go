package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/sdk"
)

// Spec is a build's template as E2B's SDK serializes it (TemplateBase's
// serialize): a base, steps, and the start and ready commands.
type Spec struct {
	FromImage         string          `json:"fromImage,omitempty"`
	FromTemplate      string          `json:"fromTemplate,omitempty"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry,omitempty"`
	StartCmd          string          `json:"startCmd,omitempty"`
	ReadyCmd          string          `json:"readyCmd,omitempty"`
	Steps             []Step          `json:"steps"`
	// Force rebuilds every step, whatever earlier builds left.
	Force bool `json:"force,omitempty"`
}

// Step is one instruction: RUN [cmd, user?], COPY [src, dest, user?,
// mode?] with the hash of its uploaded files, ENV [k, v, …], WORKDIR
// [dir], USER [name]. Force rebuilds it (and the steps after it).
type Step struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	Force     bool     `json:"force,omitempty"`
	FilesHash string   `json:"filesHash,omitempty"`
}

// maxSteps bounds a template's steps.
const maxSteps = 256

// e2bBaseImage is the base E2B's SDK names when a template names none;
// here it is the base template.
const e2bBaseImage = "e2bdev/base"

// validate checks s before a build starts on it for team.
func (s *Spec) validate(b *Builder, team string) error {
	if len(s.Steps) > maxSteps {
		return fmt.Errorf("template has %d steps, at most %d: %w", len(s.Steps), maxSteps, errdefs.ErrInvalidArgument)
	}
	if len(s.FromImageRegistry) > 0 && string(s.FromImageRegistry) != "null" {
		return fmt.Errorf("fromImageRegistry (registry credentials) is not supported: make the image reachable without them, or `tupper image pull` it first: %w", errdefs.ErrNotSupported)
	}
	for i, st := range s.Steps {
		n := len(st.Args)
		bad := false
		switch st.Type {
		case "RUN":
			bad = n < 1 || n > 2
		case "COPY":
			bad = n < 2 || n > 4
			if !bad {
				p, ok, err := b.UploadPath(team, st.FilesHash)
				if err != nil || !ok {
					return fmt.Errorf("step %d (COPY %s): its files (hash %.12s) were not uploaded: %w", i+1, st.Args[0], st.FilesHash, errdefs.ErrFailedPrecondition)
				}
				keepUpload(p)
			}
		case "ENV":
			bad = n == 0 || n%2 != 0
		case "WORKDIR", "USER":
			bad = n != 1 || st.Args[0] == ""
		default:
			return fmt.Errorf("step %d: unknown instruction %q (RUN, COPY, ENV, WORKDIR and USER are): %w", i+1, st.Type, errdefs.ErrInvalidArgument)
		}
		if bad {
			return fmt.Errorf("step %d: %s with %d arguments: %w", i+1, st.Type, n, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// StartBuild starts build buildID of template templateID on spec, in the
// background; Status follows it. A build starts once.
func (b *Builder) StartBuild(ctx context.Context, team, templateID, buildID string, spec Spec) error {
	if err := spec.validate(b, team); err != nil {
		return err
	}
	var tpl *Template
	err := b.cat.update(func() error {
		t, err := b.cat.findLocked(team, templateID)
		if err != nil {
			return err
		}
		bd, err := t.buildOf(buildID)
		if err != nil {
			return err
		}
		if bd.Status != StatusWaiting {
			return fmt.Errorf("build %s: %w: %w", buildID, errBuildStarted, errdefs.ErrFailedPrecondition)
		}
		if err := b.cat.checkPendingLocked(team); err != nil {
			return err
		}
		bd.Status, bd.Steps = StatusBuilding, len(spec.Steps)
		tpl = t.snapshot()
		return nil
	})
	if err != nil {
		return err
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.run(tpl, buildID, spec)
	}()
	return nil
}

// buildError is a build's failure, at a step.
type buildError struct {
	step string
	err  error
}

func (e *buildError) Error() string { return e.err.Error() }
func (e *buildError) Unwrap() error { return e.err }

func atStep(step string, err error) error {
	var be *buildError
	if errors.As(err, &be) {
		return err
	}
	return &buildError{step: step, err: err}
}

// run runs a build to its end and records how it ended.
func (b *Builder) run(t *Template, buildID string, spec Spec) {
	logf := func(level, format string, args ...any) { b.logf(t.ID, buildID, level, format, args...) }
	select {
	case b.building <- struct{}{}:
	case <-b.bg.Done():
		return
	}
	defer func() { <-b.building }()
	ctx, cancel := context.WithTimeout(buildScope(b.bg, t), b.cfg.BuildTimeout)
	defer cancel()
	begin := time.Now()
	logf("info", "Building template %s (%s), build %s", t.Names[0], t.ID, buildID)
	img, cached, err := b.build(ctx, t, buildID, spec, logf)
	if err == nil {
		err = b.publish(ctx, t, buildID, img)
	}
	if err != nil {
		step := ""
		var be *buildError
		if errors.As(err, &be) {
			step = be.step
		}
		logf("error", "Build failed: %v", err)
		b.setBuild(t.ID, buildID, func(_ *Template, bd *Build) {
			bd.Status, bd.FinishedAt, bd.CachedSteps = StatusError, time.Now().UTC(), cached
			bd.Reason = &Reason{Message: err.Error(), Step: step}
		})
		b.log.Warn("template build failed", "template", t.ID, "build", buildID, "err", err)
		return
	}
	logf("info", "Build finished in %v (%d of %d steps from the cache)", time.Since(begin).Round(time.Millisecond), cached, len(spec.Steps))
	b.setBuild(t.ID, buildID, func(_ *Template, bd *Build) {
		bd.Status, bd.FinishedAt, bd.Image, bd.CachedSteps = StatusReady, time.Now().UTC(), img.ID, cached
	})
	b.log.Info("template built", "template", t.ID, "build", buildID, "image", img.ID, "cached", cached, "took", time.Since(begin))
}

// buildScope is ctx scoped to template t's team: the sandboxes that run
// its build are that team's (another team neither sees nor reaches them,
// as with any sandbox of the team), and so are the images they start
// from. Without a team (an embedded builder), ctx is left as it is.
func buildScope(ctx context.Context, t *Template) context.Context {
	if t.Team == "" {
		return ctx
	}
	return engine.WithScope(ctx, engine.Scope{Team: t.Team})
}

// publish names the image of build buildID by the template's id, its
// names and the build's tags.
func (b *Builder) publish(ctx context.Context, t *Template, buildID string, img *image.Image) error {
	var names []string
	err := b.cat.update(func() error {
		cur, ok := b.cat.byID[t.ID]
		if !ok {
			return fmt.Errorf("template %s was deleted during its build: %w", t.ID, errdefs.ErrNotFound)
		}
		bd, err := cur.buildOf(buildID)
		if err != nil {
			return err
		}
		for _, tag := range bd.Tags {
			cur.Tags[tag] = buildID
		}
		for _, n := range imageNames(cur) {
			if cur.Tags[tagOfName(n)] == buildID || n == cur.ID {
				names = append(names, n)
			}
		}
		return nil
	})
	if err != nil {
		return atStep("finalize", err)
	}
	for _, n := range names {
		if err := b.cfg.Images.Tag(ctx, img.ID, n); err != nil {
			return atStep("finalize", fmt.Errorf("name the image %s: %w", n, err))
		}
	}
	return nil
}

// build runs spec's steps from its base, reusing the images of an
// unchanged prefix, and returns the final image and how many steps came
// from the cache.
func (b *Builder) build(ctx context.Context, t *Template, buildID string, spec Spec, logf func(level, format string, args ...any)) (*image.Image, int, error) {
	base, err := b.baseImage(ctx, t.Team, spec, logf)
	if err != nil {
		return nil, 0, atStep("base", err)
	}
	keys := stepKeys(t.Team, base.ID, spec.Steps)
	start, cur := 0, base
	if !spec.Force {
		for i := len(spec.Steps); i > 0; i-- {
			if slices.ContainsFunc(spec.Steps[:i], func(s Step) bool { return s.Force }) {
				continue
			}
			// Looked up, not resolved: a cached image is unpacked only if
			// a build sandbox boots from it, never just to be found.
			if img, err := b.cfg.Images.Lookup(ctx, cacheName(keys[i-1])); err == nil {
				start, cur = i, img
				break
			}
		}
	}
	for i := range start {
		logf("info", "CACHED [%d/%d] %s", i+1, len(spec.Steps), describe(spec.Steps[i]))
	}
	b.setBuild(t.ID, buildID, func(_ *Template, bd *Build) { bd.CachedSteps = start })
	if start < len(spec.Steps) {
		cur, err = b.runSteps(ctx, t, cur, spec, start, keys, logf)
		if err != nil {
			return nil, start, err
		}
	}
	final, err := b.finalize(ctx, t, cur, spec, logf)
	return final, start, err
}

// baseImage resolves the base of a build for team: a template of team's,
// or an image of the store that is every team's (pulled when missing).
func (b *Builder) baseImage(ctx context.Context, team string, spec Spec, logf func(level, format string, args ...any)) (*image.Image, error) {
	ref := spec.FromTemplate
	if ref == "" {
		ref = spec.FromImage
	}
	if ref == "" || ref == e2bBaseImage || strings.HasPrefix(ref, e2bBaseImage+":") {
		ref = "base"
	}
	if alias, ok := image.TemplateAliases[ref]; ok {
		ref = alias
	}
	img, err := b.cfg.Images.Resolve(ctx, ref)
	if err == nil && !ownedBy(img, team) {
		// Another team's template is not there for this one, and is
		// not pulled either.
		return nil, fmt.Errorf("base %s: %w", ref, errdefs.ErrNotFound)
	}
	if err == nil {
		logf("info", "FROM %s (%s)", ref, shortID(img.ID))
		return img, nil
	}
	if !errdefs.IsNotFound(err) || spec.FromImage == "" {
		return nil, err
	}
	logf("info", "Pulling %s", ref)
	img, perr := b.cfg.Images.Pull(ctx, ref, pullOptions(), nil)
	if perr != nil {
		return nil, fmt.Errorf("base image %s is not in the store, and pulling it failed: %w", ref, perr)
	}
	return img, nil
}

// ownedBy reports whether img may be used by team's builds: it is
// team's, or every team's.
func ownedBy(img *image.Image, team string) bool {
	owner := engine.ImageTeam(img)
	return owner == "" || owner == team
}

// stepKeys returns, for each step of a build of team's, the key of the
// image after it: the team, what came before the step and what it is
// (with its files' hash). Each team has a cache of its own: a COPY step's
// hash is the client's word, not the daemon's (see UploadPath), and a
// step's result may hold what the team's build fetched or was given, so
// one team's layers must never stand in for another's.
func stepKeys(team, baseID string, steps []Step) []string {
	keys := make([]string, len(steps))
	prev := cacheFormat + " team " + strconv.Quote(team) + " base " + baseID
	for i, st := range steps {
		h := sha256.New()
		fmt.Fprintf(h, "%s\x00%s\x00%s", prev, st.Type, st.FilesHash)
		for _, a := range st.Args {
			fmt.Fprintf(h, "\x00%s", a)
		}
		prev = hex.EncodeToString(h.Sum(nil))
		keys[i] = prev
	}
	return keys
}

// cacheFormat changes whenever the way steps become layers changes, so
// that no build reuses layers made the old way.
const cacheFormat = "tupper-steps-3"

// cacheName is the image name of the cached image of step key.
func cacheName(key string) string { return "tupper-build-cache/" + key[:40] }

func describe(st Step) string {
	args := strings.Join(st.Args, " ")
	if len(args) > 200 {
		args = args[:200] + "…"
	}
	return st.Type + " " + args
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// buildState is what the steps so far set for the steps after them.
type buildState struct {
	env     []string
	user    string
	workdir string
}

func (s *buildState) envMap() map[string]string {
	m := map[string]string{}
	for _, kv := range s.env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func (s *buildState) setEnv(k, v string) {
	s.env = slices.DeleteFunc(s.env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	s.env = append(s.env, k+"="+v)
}

// defaultUser is who a RUN or COPY without a user runs as, until a USER
// step says otherwise: E2B's sandbox user.
const defaultUser = "user"

// runSteps runs spec's steps from start on in one sandbox booted from
// cur, committing each as an image stacked on the one before.
func (b *Builder) runSteps(ctx context.Context, t *Template, cur *image.Image, spec Spec, start int, keys []string, logf func(level, format string, args ...any)) (*image.Image, error) {
	sb, err := b.cfg.Sandboxes.Create(ctx, sdk.CreateOptions{
		Image: cur.ID, Timeout: b.cfg.BuildTimeout, CPUs: t.CPUs, MemoryMB: t.MemoryMB, Network: sdkPolicy(b.cfg.Network),
		Metadata: map[string]string{"e2b-template-build": t.ID},
	})
	if err != nil {
		return nil, atStep(strconv.Itoa(start+1), fmt.Errorf("boot the build sandbox: %w", err))
	}
	defer func() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := sb.Kill(kctx); err != nil && !errdefs.IsNotFound(err) {
			b.log.Warn("kill the build sandbox", "sandbox", sb.ID(), "err", err)
		}
	}()
	st := &buildState{env: slices.Clone(cur.Config.Env), user: cur.Config.User, workdir: cur.Config.WorkingDir}
	userSet := cur.Config.User != ""
	if st.user == "" {
		st.user = defaultUser
	}
	work, err := os.MkdirTemp(b.cfg.Root, "build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	prev := ""
	for i := start; i < len(spec.Steps); i++ {
		step := spec.Steps[i]
		stepName := strconv.Itoa(i + 1)
		logf("info", "[%d/%d] %s", i+1, len(spec.Steps), describe(step))
		if err := b.runStep(ctx, sb, t.Team, step, st, logf); err != nil {
			return nil, atStep(stepName, err)
		}
		if step.Type == "USER" {
			userSet = true
		}
		cum := filepath.Join(work, fmt.Sprintf("cumulative-%d.tar", i))
		if err := b.export(ctx, sb.ID(), cum); err != nil {
			return nil, atStep(stepName, err)
		}
		layer := filepath.Join(work, fmt.Sprintf("layer-%d.tar", i))
		if err := writeDiff(prev, cum, layer); err != nil {
			return nil, atStep(stepName, fmt.Errorf("compute the step's layer: %w", err))
		}
		if prev != "" {
			os.Remove(prev)
		}
		prev = cum
		snapshot := *st
		img, err := b.cfg.Images.Commit(ctx, image.CommitOptions{
			Parent: cur.ID, Layer: layer, CreatedBy: describe(step), Names: []string{cacheName(keys[i])},
			Edit: func(c *v1.Config) {
				c.Env, c.WorkingDir = slices.Clone(snapshot.env), snapshot.workdir
				if userSet {
					c.User = snapshot.user
				}
				setTeam(c, t.Team)
			},
		})
		os.Remove(layer)
		if err != nil {
			return nil, atStep(stepName, fmt.Errorf("commit the step: %w", err))
		}
		cur = img
	}
	return cur, nil
}

// export writes the build sandbox's changes so far to path.
func (b *Builder) export(ctx context.Context, id, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := b.cfg.Engine.ExportChanges(ctx, id, f); err != nil {
		f.Close()
		return fmt.Errorf("take the sandbox's changes: %w", err)
	}
	return f.Close()
}

func writeDiff(prev, cur, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := diffLayers(prev, cur, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// maxStepOutput bounds what one step's output adds to the build's log.
const maxStepOutput = 4 << 20

// runStep runs one step of a build of team's in sb, changing st as the
// step says.
func (b *Builder) runStep(ctx context.Context, sb *sdk.Sandbox, team string, step Step, st *buildState, logf func(level, format string, args ...any)) error {
	switch step.Type {
	case "ENV":
		for i := 0; i+1 < len(step.Args); i += 2 {
			st.setEnv(step.Args[i], step.Args[i+1])
		}
		return nil
	case "USER":
		st.user = step.Args[0]
		return nil
	case "WORKDIR":
		dir := step.Args[0]
		if !strings.HasPrefix(dir, "/") && st.workdir != "" {
			dir = st.workdir + "/" + dir
		}
		st.workdir = dir
		return b.shell(ctx, sb, `mkdir -p -- "$TUPPER_DIR"`, "root", map[string]string{"TUPPER_DIR": dir}, "", logf)
	case "RUN":
		user := st.user
		if len(step.Args) > 1 && step.Args[1] != "" {
			user = step.Args[1]
		}
		return b.shell(ctx, sb, step.Args[0], user, st.envMap(), st.workdir, logf)
	case "COPY":
		return b.copyFiles(ctx, sb, team, step, st, logf)
	}
	return fmt.Errorf("unknown instruction %q: %w", step.Type, errdefs.ErrInvalidArgument)
}

// shell runs cmd in sb as user, its output going to the build's log; a
// failure names the exit code.
func (b *Builder) shell(ctx context.Context, sb *sdk.Sandbox, cmd, user string, env map[string]string, cwd string, logf func(level, format string, args ...any)) error {
	logged := 0
	out := func(level string) func(string) {
		return func(s string) {
			if logged > maxStepOutput {
				return
			}
			logged += len(s)
			logf(level, "%s", s)
		}
	}
	opts := []sdk.CommandOption{sdk.WithUser(user), sdk.WithEnv(env), sdk.WithTimeout(0), sdk.WithOnStdout(out("info")), sdk.WithOnStderr(out("info"))}
	if cwd != "" {
		opts = append(opts, sdk.WithCwd(cwd))
	}
	res, err := sb.Commands.Run(ctx, cmd, opts...)
	var exit *sdk.CommandExitError
	if errors.As(err, &exit) || err == nil && res != nil && res.ExitCode != 0 {
		code := -1
		if res != nil {
			code = res.ExitCode
		}
		return fmt.Errorf("the command failed with exit code %d: %s", code, firstLine(cmd))
	}
	if err != nil {
		return fmt.Errorf("run %s: %w", firstLine(cmd), err)
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// copyScript places the files of an uploaded archive, unpacked in $T, as
// Docker's COPY does: a directory's contents into DEST, a file to DEST
// (into it when DEST ends with / or is a directory). Only what it copied
// (and DEST, when it made it) gets OWNER and MODE: a COPY into /etc must
// not hand /etc, or /etc/passwd beside it, to the template's user.
const copyScript = `set -e
T=$(mktemp -d /tmp/.tupper-copy.XXXXXX)
L=$(mktemp /tmp/.tupper-copy-list.XXXXXX)
trap 'rm -rf "$T" "$L" "$ARCHIVE"' EXIT
tar -xf "$ARCHIVE" -C "$T"
made=
[ -e "$DEST" ] || made=1
cd "$T"
found=
for s in $SRC; do
  [ -e "$s" ] || [ -L "$s" ] || continue
  found=1
  if [ -d "$s" ] && [ ! -L "$s" ]; then
    mkdir -p -- "$DEST"
    for e in "$s"/* "$s"/.[!.]* "$s"/..?*; do
      [ -e "$e" ] || [ -L "$e" ] || continue
      cp -a -- "$e" "$DEST"/
      printf '%s\n' "$DEST/$(basename -- "$e")" >> "$L"
    done
  else
    case "$DEST" in
      */) mkdir -p -- "$DEST"; t="$DEST$(basename -- "$s")" ;;
      *) if [ -d "$DEST" ]; then t="$DEST/$(basename -- "$s")"; else mkdir -p -- "$(dirname -- "$DEST")"; t="$DEST"; fi ;;
    esac
    cp -a -- "$s" "$t"
    printf '%s\n' "$t" >> "$L"
  fi
done
[ -n "$found" ] || { echo "COPY: no file matches $SRC in the uploaded files" >&2; exit 1; }
if [ -n "$made" ]; then printf '%s\n' "$DEST" >> "$L"; fi
while IFS= read -r p; do
  if [ -n "$OWNER" ]; then chown -hR -- "$OWNER:" "$p"; fi
  if [ -n "$MODE" ] && [ ! -L "$p" ]; then chmod -R -- "$MODE" "$p"; fi
done < "$L"
`

// copyFiles runs a COPY step: the uploaded archive goes into the sandbox
// and copyScript places its files.
func (b *Builder) copyFiles(ctx context.Context, sb *sdk.Sandbox, team string, step Step, st *buildState, logf func(level, format string, args ...any)) error {
	p, ok, err := b.UploadPath(team, step.FilesHash)
	if err != nil || !ok {
		return fmt.Errorf("the files of COPY %s were not uploaded: %w", step.Args[0], errdefs.ErrFailedPrecondition)
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	archive := "/tmp/.tupper-copy-" + step.FilesHash[:16] + ".tar"
	if _, err := sb.Files.WriteStream(ctx, archive, f, sdk.WithUser("root")); err != nil {
		return fmt.Errorf("send the files of COPY %s: %w", step.Args[0], err)
	}
	dest := step.Args[1]
	if !strings.HasPrefix(dest, "/") {
		base := st.workdir
		if base == "" {
			base = "/home/" + st.user
		}
		dest = base + "/" + dest
	}
	owner := st.user
	if len(step.Args) > 2 && step.Args[2] != "" {
		owner = step.Args[2]
	}
	mode := ""
	if len(step.Args) > 3 {
		mode = step.Args[3]
	}
	env := map[string]string{"ARCHIVE": archive, "SRC": step.Args[0], "DEST": dest, "OWNER": owner, "MODE": mode}
	return b.shell(ctx, sb, copyScript, "root", env, "", logf)
}

// finalize makes the build's image: cur with the template's start and
// ready commands and limits as labels, unpacked for the creates to come.
// A start command is tried in a sandbox of the image, which must pass its
// ready check, as E2B's builds do.
func (b *Builder) finalize(ctx context.Context, t *Template, cur *image.Image, spec Spec, logf func(level, format string, args ...any)) (*image.Image, error) {
	labels := map[string]string{}
	if spec.StartCmd != "" {
		labels[image.LabelStartCmd] = spec.StartCmd
		if spec.ReadyCmd != "" {
			labels[image.LabelReadyCmd] = spec.ReadyCmd
		}
		// As the build's last USER and WORKDIR left them.
		if cur.Config.User != "" {
			labels[image.LabelStartUser] = cur.Config.User
		}
		if cur.Config.WorkingDir != "" {
			labels[image.LabelStartWorkdir] = cur.Config.WorkingDir
		}
	}
	if t.CPUs > 0 {
		labels[image.LabelCPUs] = strconv.FormatFloat(t.CPUs, 'f', -1, 64)
	}
	if t.MemoryMB > 0 {
		labels[image.LabelMemoryMB] = strconv.Itoa(t.MemoryMB)
	}
	img, err := b.cfg.Images.Commit(ctx, image.CommitOptions{
		Parent: cur.ID, CreatedBy: "template " + t.ID, Unpack: true,
		Edit: func(c *v1.Config) {
			if c.Labels == nil {
				c.Labels = map[string]string{}
			}
			for _, k := range []string{image.LabelStartCmd, image.LabelReadyCmd, image.LabelStartUser, image.LabelStartWorkdir, image.LabelCPUs, image.LabelMemoryMB} {
				delete(c.Labels, k)
			}
			for k, v := range labels {
				c.Labels[k] = v
			}
			setTeam(c, t.Team)
		},
	})
	if err != nil {
		return nil, atStep("finalize", fmt.Errorf("commit the template's image: %w", err))
	}
	if spec.StartCmd == "" {
		return img, nil
	}
	logf("info", "Checking the start command: %s", firstLine(spec.StartCmd))
	sb, err := b.cfg.Sandboxes.Create(ctx, sdk.CreateOptions{Image: img.ID, Timeout: 5 * time.Minute, Network: sdkPolicy(b.cfg.Network)})
	if err != nil {
		return nil, atStep("finalize", fmt.Errorf("the start command did not become ready: %w", err))
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := sb.Kill(kctx); err != nil && !errdefs.IsNotFound(err) {
		b.log.Warn("kill the start-command check", "sandbox", sb.ID(), "err", err)
	}
	logf("info", "The start command is ready")
	return img, nil
}

// setTeam labels the config of an image that a build of team's makes as
// team's (engine.LabelTeam): other teams neither start sandboxes nor
// build on it. An embedded builder's (no team) images are every team's.
func setTeam(c *v1.Config, team string) {
	if team == "" {
		delete(c.Labels, engine.LabelTeam)
		return
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	c.Labels[engine.LabelTeam] = team
}

// sdkPolicy is a copy of p, as the SDK takes it.
func sdkPolicy(p *netpolicy.Policy) *sdk.NetworkPolicy { return p.Clone() }
