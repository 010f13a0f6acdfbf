package sdk

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A template is a named image that sandboxes start from, made by running
// steps on a base, as E2B's template SDK makes them:
//
//	t := sdk.NewTemplate().
//		FromImage("e2bdev/base").
//		AptInstall("ripgrep").
//		Copy("app", "/srv/app", "", 0).
//		SetWorkdir("/srv/app").
//		SetStartCmd("python3 -m http.server 8000", sdk.WaitForPort(8000))
//	build, err := client.BuildTemplate(ctx, t, "my-app")
//	sb, err := client.Create(ctx, sdk.CreateOptions{Template: "my-app"})
//
// The methods that take shell commands pass them on as they are: quote
// what comes from elsewhere.

// DefaultBaseImage is the base of a template that names none: E2B's base
// image, which Tupper serves as its "base" template.
const DefaultBaseImage = "e2bdev/base"

// Template is a template's definition: its base, its steps, and the
// command sandboxes of it start with. Each method adds to it and returns
// it, so that calls chain; a mistake in one (a COPY source outside
// ContextDir) is reported by Client.BuildTemplate. The zero value is an
// empty definition on DefaultBaseImage. A Template is not safe for
// concurrent use.
type Template struct {
	// ContextDir is the directory COPY sources are relative to; empty
	// means the current directory. Its .dockerignore, when there is one,
	// leaves files out of every COPY, as IgnorePatterns do.
	ContextDir string
	// IgnorePatterns leave files out of every COPY: .dockerignore
	// patterns ("*.log", "**/node_modules", "!keep.log"), matched
	// against paths relative to ContextDir.
	IgnorePatterns []string

	fromImage, fromTemplate string
	steps                   []TemplateStep
	startCmd, readyCmd      string
	// force rebuilds every step; forceNext the steps added from now on
	// (SkipCache).
	force, forceNext bool
	// err is the first mistake of a call, reported at the build.
	err error
}

// NewTemplate returns an empty definition, to chain calls on.
func NewTemplate() *Template { return &Template{} }

// TemplateSpec is a template as the build API takes it (E2B's
// serialized template): a base, steps, and the start and ready commands.
type TemplateSpec struct {
	FromImage    string         `json:"fromImage,omitempty"`
	FromTemplate string         `json:"fromTemplate,omitempty"`
	StartCmd     string         `json:"startCmd,omitempty"`
	ReadyCmd     string         `json:"readyCmd,omitempty"`
	Steps        []TemplateStep `json:"steps"`
	// Force rebuilds every step, whatever earlier builds left.
	Force bool `json:"force"`
}

// TemplateStep is one step of a template: RUN [cmd, user?], COPY [src,
// dest, user, mode] with FilesHash naming its files' archive, ENV [key,
// value, …], WORKDIR [dir] or USER [name]. Force rebuilds it and the
// steps after it.
type TemplateStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	Force     bool     `json:"force"`
	FilesHash string   `json:"filesHash,omitempty"`
}

// spec returns t's serialized form; COPY steps carry no hash yet.
func (t *Template) spec() *TemplateSpec {
	s := &TemplateSpec{
		FromImage: t.fromImage, FromTemplate: t.fromTemplate, StartCmd: t.startCmd, ReadyCmd: t.readyCmd,
		Steps: make([]TemplateStep, len(t.steps)), Force: t.force,
	}
	for i, st := range t.steps {
		st.Args = slices.Clone(st.Args)
		s.Steps[i] = st
	}
	if s.FromImage == "" && s.FromTemplate == "" {
		s.FromImage = DefaultBaseImage
	}
	return s
}

// MarshalJSON encodes t as the build API takes it, without the hashes of
// its COPY steps' files (which BuildTemplate adds), as E2B's
// Template.toJSON(template, false) does.
func (t *Template) MarshalJSON() ([]byte, error) {
	if t.err != nil {
		return nil, t.err
	}
	return json.Marshal(t.spec())
}

// Err returns the first mistake of a call on t, or nil.
func (t *Template) Err() error { return t.err }

func (t *Template) fail(err error) *Template {
	if t.err == nil {
		t.err = err
	}
	return t
}

func (t *Template) add(typ string, args ...string) *Template {
	t.steps = append(t.steps, TemplateStep{Type: typ, Args: args, Force: t.forceNext})
	return t
}

// FromImage bases the template on image ref: an image of Tupper's store
// (pulled when missing) or a template's name. DefaultBaseImage is the
// "base" template.
func (t *Template) FromImage(ref string) *Template {
	t.fromImage, t.fromTemplate = ref, ""
	if t.forceNext {
		t.force = true
	}
	return t
}

// FromBaseImage bases the template on DefaultBaseImage.
func (t *Template) FromBaseImage() *Template { return t.FromImage(DefaultBaseImage) }

// FromTemplate bases the template on another template, by its name or id.
func (t *Template) FromTemplate(name string) *Template {
	t.fromTemplate, t.fromImage = name, ""
	if t.forceNext {
		t.force = true
	}
	return t
}

// RunCmd runs cmd with bash as user; an empty user is the one the last
// SetUser named (E2B's "user" before any).
func (t *Template) RunCmd(cmd, user string) *Template {
	if user == "" {
		return t.add("RUN", cmd)
	}
	return t.add("RUN", cmd, user)
}

// Copy copies src, a file, a directory or a glob pattern ("*.py")
// relative to ContextDir, to dest in the template, as Docker's COPY does:
// a directory's contents go into dest, a file goes to dest, or into it
// when dest ends with "/" or is a directory. A relative dest is taken
// from the working directory. The files belong to user ("" is the
// current one) and, when mode is not zero, get mode's permission bits
// (and setuid, setgid and sticky).
func (t *Template) Copy(src, dest, user string, mode fs.FileMode) *Template {
	if filepath.IsAbs(src) || path.IsAbs(filepath.ToSlash(src)) {
		return t.fail(fmt.Errorf("COPY %s: absolute source paths are not allowed: give a path relative to the context directory", src))
	}
	clean := path.Clean(filepath.ToSlash(src))
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return t.fail(fmt.Errorf("COPY %s: the source path escapes the context directory", src))
	}
	m := ""
	if mode != 0 {
		m = fmt.Sprintf("%04o", unixMode(mode)&0o7777)
	}
	return t.add("COPY", src, dest, user, m)
}

// SetEnvs sets environment variables for the steps after it and for the
// template's sandboxes. They become one ENV step, in the keys' order.
func (t *Template) SetEnvs(envs map[string]string) *Template {
	if len(envs) == 0 {
		return t
	}
	var args []string
	for _, k := range slices.Sorted(maps.Keys(envs)) {
		args = append(args, k, envs[k])
	}
	return t.add("ENV", args...)
}

// SetWorkdir makes dir (made when missing) the working directory of the
// steps after it and of the template's sandboxes.
func (t *Template) SetWorkdir(dir string) *Template { return t.add("WORKDIR", dir) }

// SetUser makes user the one the steps after it run as, and the
// template's sandboxes' default user.
func (t *Template) SetUser(user string) *Template { return t.add("USER", user) }

// AptInstall installs Debian packages as root, as E2B's aptInstall does:
// apt-get update, then apt-get install -y without questions.
func (t *Template) AptInstall(packages ...string) *Template {
	return t.RunCmd("apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y "+strings.Join(packages, " "), "root")
}

// PipInstall installs Python packages for every user (as root), as E2B's
// pipInstall does; no packages installs the working directory's project
// ("pip install .").
func (t *Template) PipInstall(packages ...string) *Template {
	if len(packages) == 0 {
		return t.RunCmd("pip install .", "root")
	}
	return t.RunCmd("pip install "+strings.Join(packages, " "), "root")
}

// NpmInstall installs Node packages in the working directory as the
// current user, as E2B's npmInstall does; no packages installs the
// project's dependencies ("npm install").
func (t *Template) NpmInstall(packages ...string) *Template {
	return t.RunCmd(strings.Join(append([]string{"npm", "install"}, packages...), " "), "")
}

// NpmInstallGlobal installs Node packages globally (npm install -g, as
// root), as E2B's npmInstall with g does.
func (t *Template) NpmInstallGlobal(packages ...string) *Template {
	return t.RunCmd(strings.Join(append([]string{"npm", "install", "-g"}, packages...), " "), "root")
}

// SkipCache makes the steps added after it run again at every build,
// whatever earlier builds left, as E2B's skipCache does; called before
// FromImage or FromTemplate, it makes every step run again.
func (t *Template) SkipCache() *Template {
	t.forceNext = true
	return t
}

// SetStartCmd makes cmd the command every sandbox of the template starts
// with, and ready the check it must pass before a create returns (run
// again and again until it succeeds); an empty ready means none. The
// build itself starts a sandbox, which must pass it.
func (t *Template) SetStartCmd(cmd string, ready ReadyCmd) *Template {
	t.startCmd, t.readyCmd = cmd, string(ready)
	return t
}

// SetReadyCmd sets the check of SetStartCmd alone.
func (t *Template) SetReadyCmd(ready ReadyCmd) *Template {
	t.readyCmd = string(ready)
	return t
}

// ReadyCmd is a shell command that succeeds once a template's start
// command is ready. The WaitFor functions make the usual ones, the same
// commands as E2B's SDKs.
type ReadyCmd string

// WaitForPort is ready once something listens on port.
func WaitForPort(port int) ReadyCmd {
	return ReadyCmd(fmt.Sprintf(`[ -n "$(ss -Htuln sport = :%d)" ]`, port))
}

// WaitForURL is ready once url answers with status (0 means 200).
func WaitForURL(url string, status int) ReadyCmd {
	if status == 0 {
		status = 200
	}
	return ReadyCmd(fmt.Sprintf(`curl -s -o /dev/null -w "%%{http_code}" %s | grep -q "%d"`, shellQuote(url), status))
}

// WaitForProcess is ready once a process of that name runs.
func WaitForProcess(name string) ReadyCmd {
	return ReadyCmd("pgrep " + shellQuote(name) + " > /dev/null")
}

// WaitForFile is ready once file exists.
func WaitForFile(file string) ReadyCmd {
	return ReadyCmd("[ -f " + shellQuote(file) + " ]")
}

// WaitForTimeout is ready after d, counted in whole seconds (at least
// one).
func WaitForTimeout(d time.Duration) ReadyCmd {
	return ReadyCmd("sleep " + strconv.FormatInt(max(1, int64(d/time.Second)), 10))
}

// shellUnsafe matches a character that needs quoting in a shell word, as
// E2B's SDK decides it.
var shellUnsafe = regexp.MustCompile(`[^\w@%+=:,./-]`)

// shellQuote quotes s as one shell word when it needs it.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	if !shellUnsafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// unixMode is m as a Unix st_mode: the file type bits and the permission
// bits with setuid, setgid and sticky where Unix has them.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	switch m.Type() {
	case 0:
		u |= 0o100000
	case fs.ModeDir:
		u |= 0o040000
	case fs.ModeSymlink:
		u |= 0o120000
	case fs.ModeNamedPipe:
		u |= 0o010000
	case fs.ModeSocket:
		u |= 0o140000
	case fs.ModeDevice:
		u |= 0o060000
	case fs.ModeDevice | fs.ModeCharDevice:
		u |= 0o020000
	}
	return u
}
