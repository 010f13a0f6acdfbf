package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"strconv"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// A Dockerfile read as a template's definition, for `tupper template
// build`. Docker's own rules hold where the template can keep them: RUN
// runs as root until a USER line; COPY's files are root's unless --chown
// names another; the template's sandboxes run as the last USER (else the
// base's default user) in the last WORKDIR; ENV values and the arguments
// of COPY, ADD, WORKDIR and USER expand the variables earlier ENV lines
// set. CMD and ENTRYPOINT make the start command, and a comment line
// "# tupper:ready <command>" its ready check. What a template cannot do is
// refused with the line that asks for it.

// dockerfile is a parsed Dockerfile: the template, and for each of its
// steps the line it came from.
type dockerfile struct {
	tpl   *sdk.Template
	lines []int
}

// readyDirective starts the comment line that gives the ready check.
var readyDirective = regexp.MustCompile(`^#\s*tupper:ready(\s+|$)`)

// logicalLine is an instruction with its continuation lines joined, and
// the number of its first line.
type logicalLine struct {
	n    int
	text string
}

// parseDockerfile reads a Dockerfile named name (for messages) from r;
// COPY sources are relative to contextDir.
func parseDockerfile(r io.Reader, name, contextDir string) (*dockerfile, error) {
	lines, ready, err := splitDockerfile(r, name)
	if err != nil {
		return nil, err
	}
	p := &dfParser{name: name, out: &dockerfile{tpl: &sdk.Template{ContextDir: contextDir}}, env: map[string]string{}}
	for _, l := range lines {
		if err := p.instruction(l); err != nil {
			return nil, err
		}
	}
	if !p.from {
		return nil, p.errorf(0, "no FROM line: name the base, an image or a template (FROM e2bdev/base is Tupper's base template)")
	}
	start := strings.TrimSpace(strings.Join(nonEmpty(p.entrypoint, p.cmd), " "))
	if ready.text != "" && start == "" {
		return nil, p.errorf(ready.n, "a ready check (# tupper:ready) needs a start command: add CMD or ENTRYPOINT")
	}
	if start != "" {
		p.out.tpl.SetStartCmd(start, sdk.ReadyCmd(ready.text))
	}
	return p.out, nil
}

// cutSpace splits s at its first run of blanks.
func cutSpace(s string) (string, string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimLeft(s[i:], " \t")
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// maxDockerfileLine bounds one line of a Dockerfile.
const maxDockerfileLine = 1 << 20

// splitDockerfile reads the instructions of r, continuation lines joined
// (a backslash ending a line joins the next, and comment lines between
// are dropped, as Docker does), and the ready check's comment.
func splitDockerfile(r io.Reader, name string) ([]logicalLine, logicalLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxDockerfileLine)
	var out []logicalLine
	var ready logicalLine
	var cur *logicalLine
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			if m := readyDirective.FindString(trimmed); m != "" {
				if cur != nil {
					return nil, ready, fmt.Errorf("%s:%d: the ready check's comment sits inside an instruction that goes on: %w", name, n, errdefs.ErrInvalidArgument)
				}
				ready = logicalLine{n: n, text: strings.TrimSpace(trimmed[len(m):])}
				if ready.text == "" {
					return nil, ready, fmt.Errorf("%s:%d: # tupper:ready needs a command, such as: # tupper:ready curl -sf localhost:8000: %w", name, n, errdefs.ErrInvalidArgument)
				}
			} else if isEscapeDirective(trimmed) && len(out) == 0 && cur == nil {
				return nil, ready, fmt.Errorf("%s:%d: the escape directive is not supported: continue lines with a backslash: %w", name, n, errdefs.ErrInvalidArgument)
			}
			continue
		}
		if cur == nil {
			if trimmed == "" {
				continue
			}
			cur = &logicalLine{n: n}
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			cur.text += rest
			continue
		}
		cur.text += line
		out = append(out, *cur)
		cur = nil
	}
	if err := sc.Err(); err != nil {
		return nil, ready, fmt.Errorf("%s:%d: %w", name, n+1, err)
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out, ready, nil
}

var escapeDirective = regexp.MustCompile(`(?i)^#\s*escape\s*=`)

func isEscapeDirective(s string) bool { return escapeDirective.MatchString(s) }

// dfParser turns instructions into steps of a template.
type dfParser struct {
	name string
	out  *dockerfile
	from bool
	// userSet is whether a USER line came: before one, RUN runs as root.
	userSet bool
	// env holds what ENV lines set, for the expansion of later lines.
	env             map[string]string
	cmd, entrypoint string
}

func (p *dfParser) errorf(line int, format string, args ...any) error {
	at := p.name
	if line > 0 {
		at = fmt.Sprintf("%s:%d", p.name, line)
	}
	return fmt.Errorf("%s: %s: %w", at, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// step records that the template's last step came from line n.
func (p *dfParser) step(n int) {
	p.out.lines = append(p.out.lines, n)
}

// unsupported names the instructions a template cannot follow, and why.
var unsupported = map[string]string{
	"ARG":         "build arguments are not supported: write the value where it is used, or set it with ENV",
	"LABEL":       "labels are not supported",
	"VOLUME":      "volumes are not declared in templates: mount one at create (tupper volume)",
	"STOPSIGNAL":  "STOPSIGNAL is not supported",
	"HEALTHCHECK": "HEALTHCHECK is not supported: give the start command a ready check (# tupper:ready <command>)",
	"SHELL":       "SHELL is not supported: RUN uses bash",
	"ONBUILD":     "ONBUILD is not supported",
	"MAINTAINER":  "MAINTAINER is not supported",
}

func (p *dfParser) instruction(l logicalLine) error {
	word, rest := cutSpace(strings.TrimSpace(l.text))
	kw := strings.ToUpper(word)
	if why, ok := unsupported[kw]; ok {
		return p.errorf(l.n, "%s: %s", kw, why)
	}
	if kw != "FROM" && !p.from {
		return p.errorf(l.n, "%s before FROM: the first instruction names the base", kw)
	}
	flags, rest, err := p.flags(l.n, kw, rest)
	if err != nil {
		return err
	}
	switch kw {
	case "FROM":
		return p.fromLine(l.n, flags, rest)
	case "RUN":
		return p.runLine(l.n, flags, rest)
	case "COPY", "ADD":
		return p.copyLine(l.n, kw, flags, rest)
	case "ENV":
		return p.envLine(l.n, flags, rest)
	case "WORKDIR", "USER":
		return p.oneArg(l.n, kw, flags, rest)
	case "CMD", "ENTRYPOINT":
		if len(flags) > 0 {
			return p.errorf(l.n, "%s takes no flags", kw)
		}
		if rest == "" {
			return p.errorf(l.n, "%s needs a command", kw)
		}
		cmd := rest
		if words, ok := execForm(rest); ok {
			cmd = quoteWords(words)
		}
		if kw == "CMD" {
			p.cmd = cmd
		} else {
			p.entrypoint = cmd
		}
		return nil
	case "EXPOSE":
		// Every port of a sandbox is reachable without it.
		return nil
	}
	return p.errorf(l.n, "unknown instruction %q", word)
}

// flags takes the --name[=value] flags off the front of an instruction's
// arguments.
func (p *dfParser) flags(n int, kw, rest string) (map[string]string, string, error) {
	flags := map[string]string{}
	for strings.HasPrefix(rest, "--") {
		word, after := cutSpace(rest)
		k, v, _ := strings.Cut(strings.TrimPrefix(word, "--"), "=")
		if k == "" {
			return nil, "", p.errorf(n, "%s: a flag without a name", kw)
		}
		flags[strings.ToLower(k)] = v
		rest = after
	}
	return flags, rest, nil
}

func (p *dfParser) fromLine(n int, flags map[string]string, rest string) error {
	if p.from {
		return p.errorf(n, "a second FROM: multi-stage builds are not supported")
	}
	for k := range flags {
		return p.errorf(n, "FROM --%s is not supported", k)
	}
	words := strings.Fields(rest)
	switch {
	case len(words) == 1:
	case len(words) == 3 && strings.EqualFold(words[1], "AS"):
		// A stage's name: nothing refers to it in a single stage.
	default:
		return p.errorf(n, "FROM takes an image or template name (and AS name)")
	}
	if strings.Contains(words[0], "$") {
		return p.errorf(n, "FROM with variables is not supported")
	}
	p.from = true
	p.out.tpl.FromImage(words[0])
	return nil
}

func (p *dfParser) runLine(n int, flags map[string]string, rest string) error {
	for k := range flags {
		return p.errorf(n, "RUN --%s is not supported", k)
	}
	if rest == "" {
		return p.errorf(n, "RUN needs a command")
	}
	if strings.HasPrefix(rest, "<<") {
		return p.errorf(n, "here-documents are not supported")
	}
	cmd := rest
	if words, ok := execForm(rest); ok {
		cmd = quoteWords(words)
	}
	user := ""
	if !p.userSet {
		user = "root"
	}
	p.out.tpl.RunCmd(cmd, user)
	p.step(n)
	return nil
}

// archiveSuffixes are the local files ADD would unpack.
var archiveSuffixes = []string{".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz", ".tar.zst", ".tzst"}

func (p *dfParser) copyLine(n int, kw string, flags map[string]string, rest string) error {
	user, mode := "root", fs.FileMode(0)
	for k, v := range flags {
		switch k {
		case "chown":
			u, g, _ := strings.Cut(v, ":")
			if u == "" || g != "" && g != u {
				return p.errorf(n, "%s --chown=%s: give a user (its own group goes with it); another group is not supported", kw, v)
			}
			user = u
		case "chmod":
			m, err := strconv.ParseUint(v, 8, 32)
			if err != nil || m > 0o7777 {
				return p.errorf(n, "%s --chmod=%s: give octal permission bits, such as 0755", kw, v)
			}
			mode = octalMode(uint32(m))
		case "from":
			return p.errorf(n, "%s --from: multi-stage builds are not supported", kw)
		default:
			return p.errorf(n, "%s --%s is not supported", kw, k)
		}
	}
	var words []string
	if w, ok := execForm(rest); ok {
		for _, word := range w {
			v, err := p.expandVars(word)
			if err != nil {
				return p.errorf(n, "%s: %v", kw, err)
			}
			words = append(words, v)
		}
	} else {
		var err error
		if words, err = p.expandWords(rest); err != nil {
			return p.errorf(n, "%s: %v", kw, err)
		}
	}
	if len(words) < 2 {
		return p.errorf(n, "%s needs a source and a destination", kw)
	}
	srcs, dest := words[:len(words)-1], words[len(words)-1]
	if len(srcs) > 1 && !strings.HasSuffix(dest, "/") {
		return p.errorf(n, "%s of several sources needs a destination directory ending with /", kw)
	}
	for _, src := range srcs {
		if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
			return p.errorf(n, "%s %s: only files of the context directory can be copied (fetch URLs with RUN curl)", kw, src)
		}
		if kw == "ADD" {
			lower := strings.ToLower(src)
			for _, s := range archiveSuffixes {
				if strings.HasSuffix(lower, s) {
					return p.errorf(n, "ADD %s: ADD would unpack the archive, which is not supported: COPY it and unpack it with RUN tar", src)
				}
			}
		}
		p.out.tpl.Copy(src, dest, user, mode)
		if err := p.out.tpl.Err(); err != nil {
			return p.errorf(n, "%v", err)
		}
		p.step(n)
	}
	return nil
}

// octalMode turns Unix permission bits into a FileMode.
func octalMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

func (p *dfParser) envLine(n int, flags map[string]string, rest string) error {
	if len(flags) > 0 {
		return p.errorf(n, "ENV takes no flags")
	}
	if rest == "" {
		return p.errorf(n, "ENV needs KEY=VALUE")
	}
	set := map[string]string{}
	var order []string
	first, after := cutSpace(rest)
	if !strings.Contains(first, "=") {
		// The old form: ENV KEY the value.
		v, err := p.expandWords(after)
		if err != nil {
			return p.errorf(n, "ENV: %v", err)
		}
		set[first], order = strings.Join(v, " "), []string{first}
	} else {
		words, err := p.expandWords(rest)
		if err != nil {
			return p.errorf(n, "ENV: %v", err)
		}
		for _, w := range words {
			k, v, ok := strings.Cut(w, "=")
			if !ok || k == "" {
				return p.errorf(n, "ENV %q: want KEY=VALUE", w)
			}
			set[k] = v
			order = append(order, k)
		}
	}
	for _, k := range order {
		if !envName.MatchString(k) {
			return p.errorf(n, "ENV %q: not a variable name", k)
		}
		p.env[k] = set[k]
	}
	p.out.tpl.SetEnvs(set)
	p.step(n)
	return nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (p *dfParser) oneArg(n int, kw string, flags map[string]string, rest string) error {
	if len(flags) > 0 {
		return p.errorf(n, "%s takes no flags", kw)
	}
	words, err := p.expandWords(rest)
	if err != nil {
		return p.errorf(n, "%s: %v", kw, err)
	}
	if len(words) != 1 {
		return p.errorf(n, "%s takes one argument", kw)
	}
	if kw == "WORKDIR" {
		p.out.tpl.SetWorkdir(words[0])
	} else {
		u, g, _ := strings.Cut(words[0], ":")
		if u == "" || g != "" && g != u {
			return p.errorf(n, "USER %s: give a user (its own group goes with it); another group is not supported", words[0])
		}
		p.out.tpl.SetUser(u)
		p.userSet = true
	}
	p.step(n)
	return nil
}

// execForm returns the words of a JSON array of strings, the exec form of
// RUN, CMD, ENTRYPOINT, COPY and ADD.
func execForm(s string) ([]string, bool) {
	if !strings.HasPrefix(s, "[") {
		return nil, false
	}
	var words []string
	if err := json.Unmarshal([]byte(s), &words); err != nil || len(words) == 0 {
		return nil, false
	}
	return words, true
}

// quoteWords makes one shell command of words, each quoted as needed.
func quoteWords(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w != "" && strings.IndexFunc(w, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			out[i] = w
			continue
		}
		out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// expandWords splits s into words as Docker does for ENV, COPY, WORKDIR
// and USER: whitespace separates words, quotes group them and go, a
// backslash escapes the next character, and $NAME or ${NAME} is the value
// an earlier ENV line set (not in single quotes). A variable no ENV line
// set is refused: the base's variables are not known here.
func (p *dfParser) expandWords(s string) ([]string, error) {
	var words []string
	var b strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else {
				b.WriteByte(c)
			}
		case c == '\\' && i+1 < len(s) && (quote == 0 || strings.IndexByte(`"\$`, s[i+1]) >= 0):
			i++
			b.WriteByte(s[i])
			inWord = true
		case c == '$':
			v, next, err := p.variable(s, i)
			if err != nil {
				return nil, err
			}
			b.WriteString(v)
			i = next - 1
			inWord = true
		case quote == '"':
			if c == '"' {
				quote = 0
			} else {
				b.WriteByte(c)
			}
		case c == '"' || c == '\'':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, b.String())
				b.Reset()
				inWord = false
			}
		default:
			b.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if inWord {
		words = append(words, b.String())
	}
	return words, nil
}

// expandVars expands the variable references of one word of an exec form
// ("$NAME", "${NAME}"; a backslash before a dollar keeps it), leaving
// the rest as it is.
func (p *dfParser) expandVars(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '$':
			i++
			b.WriteByte('$')
		case s[i] == '$':
			v, next, err := p.variable(s, i)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
			i = next - 1
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), nil
}

// variable reads the reference to a variable at s[i] ("$NAME" or
// "${NAME}") and returns its value and where the reference ends.
func (p *dfParser) variable(s string, i int) (string, int, error) {
	j := i + 1
	var name string
	if j < len(s) && s[j] == '{' {
		end := strings.IndexByte(s[j:], '}')
		if end < 0 {
			return "", 0, errors.New("unterminated ${")
		}
		name = s[j+1 : j+end]
		j += end + 1
		if !envName.MatchString(name) {
			return "", 0, fmt.Errorf("${%s}: only ${NAME} is supported", name)
		}
	} else {
		k := j
		for k < len(s) && (s[k] == '_' || s[k] >= 'a' && s[k] <= 'z' || s[k] >= 'A' && s[k] <= 'Z' || k > j && s[k] >= '0' && s[k] <= '9') {
			k++
		}
		if k == j {
			// A lone $ stands for itself.
			return "$", j, nil
		}
		name, j = s[j:k], k
	}
	v, ok := p.env[name]
	if !ok {
		return "", 0, fmt.Errorf("$%s is not set by an earlier ENV line (the base's variables are not known here): write its value", name)
	}
	return v, j, nil
}
