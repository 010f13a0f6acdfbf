package image

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/lightbearco/tupper/errdefs"
)

// BaseTemplate is the name of the default template image.
const BaseTemplate = "base"

// BaseTemplatePackages are the Debian packages of the base template: what
// agents reach for first, like E2B's base template.
var BaseTemplatePackages = []string{
	"bash", "coreutils", "procps",
	"python3", "python3-pip", "python3-venv",
	"nodejs", "npm",
	"git", "curl", "ca-certificates", "iproute2", "sudo",
	// @mastra/e2b's default template is base with these (for its
	// S3 mounts): with them here, its build needs no download.
	"s3fs", "fuse",
}

// CodeInterpreterTemplate is the template of E2B's code interpreter:
// base's packages and what the interpreter's kernels need (Jupyter's
// Python kernel with numpy, pandas and matplotlib; TypeScript). Its images
// carry LabelCodeInterpreter, so sandboxes made from them serve the
// interpreter (package agent/interpreter) on port 49999.
const CodeInterpreterTemplate = "code-interpreter"

// CodeInterpreterPackages are the Debian packages of the code-interpreter
// template on top of BaseTemplatePackages.
var CodeInterpreterPackages = []string{
	"python3-ipykernel", "python3-jupyter-client",
	"python3-numpy", "python3-pandas", "python3-matplotlib", "python3-matplotlib-inline",
	"node-typescript", "fonts-dejavu-core",
}

// LabelCodeInterpreter, on an image, is the port its sandboxes serve the
// code interpreter on.
const LabelCodeInterpreter = "dev.tupper.code-interpreter.port"

// The labels of a template's start command (E2B's setStartCmd and
// setReadyCmd). Every sandbox made from an image that carries them runs
// LabelStartCmd at its first boot, and its create returns once
// LabelReadyCmd exits 0 (both shell commands, run with bash -l -c). They
// run as LabelStartUser (none: the user "user") in LabelStartWorkdir (none:
// that user's home): the template's user and working directory at the end
// of its build.
const (
	LabelStartCmd     = "dev.tupper.start-cmd"
	LabelReadyCmd     = "dev.tupper.ready-cmd"
	LabelStartUser    = "dev.tupper.start-user"
	LabelStartWorkdir = "dev.tupper.start-workdir"
)

// Recipe is how a named template is built.
type Recipe struct {
	Packages []string
	Labels   map[string]string
}

// Recipes are the templates Tupper knows how to build by name alone
// (`tupper image build NAME`).
var Recipes = map[string]Recipe{
	BaseTemplate: {Packages: BaseTemplatePackages},
	CodeInterpreterTemplate: {
		Packages: append(slices.Clone(BaseTemplatePackages), CodeInterpreterPackages...),
		Labels:   map[string]string{LabelCodeInterpreter: "49999"},
	},
}

// TemplateAliases are other names of the templates: the names E2B's SDKs
// ask for by default.
var TemplateAliases = map[string]string{
	"code-interpreter-v1": CodeInterpreterTemplate,
}

// The account every built image gets unless BuildOptions.NoUser is set.
const (
	UserName = "user"
	UserUID  = 1000
	UserGID  = 1000
	UserHome = "/home/user"
)

// BuildOptions tunes BuildDebian.
type BuildOptions struct {
	// Suite is the Debian release; empty means "bookworm".
	Suite string
	// Variant is mmdebstrap's package selection; empty means "minbase"
	// (essential packages and apt).
	Variant string
	// Packages are installed on top of the variant.
	Packages []string
	// Mirror is the Debian mirror URL; empty means mmdebstrap's default.
	Mirror string
	// Labels become the image's OCI labels.
	Labels map[string]string
	// NoUser leaves out the "user" account (uid and gid 1000, home
	// /home/user, shell /bin/bash, password-less sudo if sudo is installed).
	NoUser bool
}

// Defaults for BuildOptions.
const (
	DefaultSuite   = "bookworm"
	DefaultVariant = "minbase"
)

var (
	debianPackageRe = regexp.MustCompile(`^[a-z0-9][a-z0-9+.\-]*(:[a-z0-9\-]+)?(=[A-Za-z0-9.+~:\-]+)?$`)
	debianWordRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9.\-]*$`)
)

// Validate reports what is wrong with o, if anything.
func (o BuildOptions) Validate() error {
	if o.Suite != "" && !debianWordRe.MatchString(o.Suite) {
		return fmt.Errorf("build: invalid Debian suite %q: use a release name such as bookworm: %w", o.Suite, errdefs.ErrInvalidArgument)
	}
	if o.Variant != "" && !debianWordRe.MatchString(o.Variant) {
		return fmt.Errorf("build: invalid mmdebstrap variant %q: use one such as minbase or essential: %w", o.Variant, errdefs.ErrInvalidArgument)
	}
	for _, p := range o.Packages {
		if !debianPackageRe.MatchString(p) {
			return fmt.Errorf("build: invalid Debian package name %q: %w", p, errdefs.ErrInvalidArgument)
		}
	}
	if o.Mirror != "" && !strings.Contains(o.Mirror, "://") {
		return fmt.Errorf("build: invalid mirror %q: give a URL such as http://deb.debian.org/debian: %w", o.Mirror, errdefs.ErrInvalidArgument)
	}
	return nil
}

// userHook adds the user account inside the tree mmdebstrap built ($1). It
// edits the account files instead of running useradd, which minbase lacks.
const userHook = `set -e
root="$1"
if ! grep -q '^user:' "$root/etc/passwd"; then
	grep -q '^user:' "$root/etc/group" || echo 'user:x:1000:' >>"$root/etc/group"
	echo 'user:x:1000:1000::/home/user:/bin/bash' >>"$root/etc/passwd"
	if [ -f "$root/etc/shadow" ]; then echo 'user:*:19700:0:99999:7:::' >>"$root/etc/shadow"; fi
	if [ -f "$root/etc/gshadow" ]; then echo 'user:*::' >>"$root/etc/gshadow"; fi
fi
mkdir -p "$root/home/user"
if [ -d "$root/etc/skel" ]; then cp -a "$root/etc/skel/." "$root/home/user/"; fi
chown -R 1000:1000 "$root/home/user"
chmod 0755 "$root/home/user"
if [ -d "$root/etc/sudoers.d" ]; then
	echo 'user ALL=(ALL:ALL) NOPASSWD: ALL' >"$root/etc/sudoers.d/user"
	chmod 0440 "$root/etc/sudoers.d/user"
fi
`

// loginShellHook makes a login shell of the built tree ($1) cheap without
// changing what it sets up. Every command the E2B SDKs send runs as
// "bash -l -c", and in a gVisor sandbox each fork and exec costs several
// milliseconds (BENCHMARKS.md, "The command path"), so a login shell that
// forks is a large part of every command. Debian's /etc/profile runs "id -u"
// in a command substitution (a fork, then an exec of id) to choose PATH, and
// root's ~/.profile runs "mesg n" whether or not there is a terminal:
//
//   - /etc/profile asks for "${EUID:-$(id -u)}": bash sets $EUID to its
//     effective uid, the number id prints, and shells without it (dash as
//     sh -l) still run id. Like every script that reads $EUID, the test
//     believes an EUID exported by the caller (bash keeps one it inherits):
//     that picks the PATH and prompt of the caller's own shell and grants
//     nothing.
//   - root's "mesg n" runs only when stdin is a terminal, the only case
//     where it does anything: without one it fails, silenced, and changes
//     nothing.
//
// Lines that differ from Debian's are left alone, so a future release's
// files stay as they come.
const loginShellHook = `set -e
root="$1"
if [ -f "$root/etc/profile" ] && [ ! -L "$root/etc/profile" ]; then
	sed -i 's/"$(id -u)"/"${EUID:-$(id -u)}"/' "$root/etc/profile"
fi
if [ -f "$root/root/.profile" ] && [ ! -L "$root/root/.profile" ]; then
	sed -i 's/^mesg n 2> \/dev\/null || true$/if [ -t 0 ]; then mesg n 2> \/dev\/null || true; fi/' "$root/root/.profile"
fi
`

// buildLogTail is how many lines of the builder's output an error quotes.
const buildLogTail = 15

// BuildDebian builds a Debian image with mmdebstrap from Debian's packages
// and stores it under name, as a single-layer image. The builder's output
// goes to progress line by line. It needs mmdebstrap on the host, root (or
// unprivileged user namespaces) and access to a Debian mirror, and takes from
// half a minute to a few minutes depending on the packages.
func (s *Store) BuildDebian(ctx context.Context, name string, opts BuildOptions, progress Progress) (*Image, error) {
	rep := newReporter(progress)
	n, err := NormalizeName(name)
	if err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	mmdebstrap, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return nil, fmt.Errorf("build %s: mmdebstrap is not installed: install it (apt-get install mmdebstrap) to build Debian images: %w", n, errdefs.ErrNotSupported)
	}
	suite := cmp.Or(opts.Suite, DefaultSuite)
	variant := cmp.Or(opts.Variant, DefaultVariant)

	end, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	dir, err := os.MkdirTemp(s.path("tmp"), "build-")
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", n, err)
	}
	defer removeTree(dir)
	out := filepath.Join(dir, "rootfs.tar")

	// --verbose shows apt's and dpkg's own lines, which count the
	// packages of each step (debianProgress).
	args := []string{"--verbose", "--variant=" + variant}
	if len(opts.Packages) > 0 {
		args = append(args, "--include="+strings.Join(opts.Packages, ","))
	}
	args = append(args, "--customize-hook="+loginShellHook)
	if !opts.NoUser {
		args = append(args, "--customize-hook="+userHook)
	}
	args = append(args, suite, out)
	if opts.Mirror != "" {
		args = append(args, opts.Mirror)
	}
	recipe := "mmdebstrap --variant=" + variant + " --include=" + strings.Join(opts.Packages, ",") + " " + suite
	if !opts.NoUser {
		recipe += " (with user account)"
	}
	rep.message(PhaseBuild, n, recipe)
	start := time.Now()
	steps := newDebianProgress(rep, n)
	if err := runBuilder(ctx, mmdebstrap, args, rep, n, steps); err != nil {
		return nil, fmt.Errorf("build %s: %w", n, err)
	}
	s.log.Info("image built", "op", "build", "image", n, "took", time.Since(start).Round(time.Second))

	steps.enterNamed(stepStore)
	diffID, size, err := s.adoptBlob(ctx, out, rep, "rootfs.tar")
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", n, err)
	}
	steps.enterNamed(stepUnpack)
	now := time.Now().UTC()
	cfg := v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      v1.Time{Time: now},
		Config: v1.Config{
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"LANG=C.UTF-8",
			},
			Cmd:    []string{"/bin/bash"},
			Labels: opts.Labels,
		},
		RootFS:  v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{diffID}},
		History: []v1.History{{Created: v1.Time{Time: now}, CreatedBy: recipe}},
	}
	rawConfig, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	img, err := s.ingest(ctx, ingestRequest{
		names:     []string{n},
		rawConfig: rawConfig,
		layers: []layerSource{{
			blobSource: blobSource{Digest: diffID, Size: size, Open: func() (io.ReadCloser, error) { return s.openBlob(diffID) }},
			DiffID:     diffID,
			MediaType:  types.OCIUncompressedLayer,
		}},
		source: recipe,
	}, rep)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", n, err)
	}
	return img, nil
}

// BuildRecipe builds the template name from its recipe in Recipes, from
// Debian bookworm with the user account.
func (s *Store) BuildRecipe(ctx context.Context, name string, progress Progress) (*Image, error) {
	r, ok := Recipes[name]
	if !ok {
		return nil, fmt.Errorf("build %s: no recipe by that name (known: %s): name the packages instead: %w",
			name, strings.Join(slices.Sorted(maps.Keys(Recipes)), ", "), errdefs.ErrNotFound)
	}
	return s.BuildDebian(ctx, name, BuildOptions{Packages: r.Packages, Labels: r.Labels}, progress)
}

// runBuilder runs a build command, streaming its output lines to progress
// and to steps. On failure the error names the step and quotes the last
// lines.
func runBuilder(ctx context.Context, path string, args []string, rep *reporter, item string, steps *debianProgress) error {
	cmd := exec.CommandContext(ctx, path, args...)
	// mmdebstrap cleans up its mounts and temporary tree on SIGTERM; a kill
	// would leave them behind.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	tail := make([]string, 0, buildLogTail)
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			if line == "" {
				continue
			}
			if len(tail) == buildLogTail {
				tail = append(tail[:0], tail[1:]...)
			}
			tail = append(tail, line)
			rep.event(Event{Phase: PhaseBuild, Item: item, Message: line})
			steps.line(line)
		}
		io.Copy(io.Discard, pr) // keep the builder from blocking on a long line
	}()
	err := cmd.Run()
	pw.Close()
	<-scanDone
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), ctx.Err())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%s failed%s: %v; its last lines:\n\t%s\ncheck the package names and that a Debian mirror is reachable",
			filepath.Base(path), steps.where(), ee, strings.Join(tail, "\n\t"))
	}
	return fmt.Errorf("run %s: %w", filepath.Base(path), err)
}
