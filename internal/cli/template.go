package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/progress"
	"github.com/lightbearco/tupper/sdk"
)

func newTemplateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "template",
		Aliases: []string{"templates"},
		Short:   "Build templates from Dockerfiles, list and remove them (clients of tupper serve)",
		Long: `A template is a named image that sandboxes start from (tupper create --template NAME,
or the SDKs' template option), built by running steps on a base as E2B's
template API builds them. Steps that an earlier build ran the same way come
from the cache.

These commands are clients of a running ` + "`tupper serve`" + `, which runs the builds.
From Go, a program that runs Tupper in-process builds through local.Runtime.`,
	}
	cmd.AddCommand(newTemplateBuildCmd(g), newTemplateLsCmd(g), newTemplateRmCmd(g))
	return cmd
}

type templateBuildOptions struct {
	api      apiOptions
	dir      string
	file     string
	name     string
	cpus     float64
	memoryMB int
	noCache  bool
	json     bool
}

func newTemplateBuildCmd(g *globals) *cobra.Command {
	o := &templateBuildOptions{}
	cmd := &cobra.Command{
		Use:   "build [DIR]",
		Short: "Build a template from a Dockerfile, with DIR (default .) as the context of its COPY lines",
		Long: `Build a template from DIR/tupper.Dockerfile, else DIR/Dockerfile (or --file), and
print its id. The log comes on standard error as the build goes; --json
writes it as JSON lines on standard output instead.

The Dockerfile may hold:
  FROM image-or-template     an image of the daemon's store (pulled when missing),
                             a template's name, or e2bdev/base (Tupper's base)
  RUN command                 as root until a USER line, as in Docker
  COPY [--chown=user] [--chmod=0755] src... dest
                             files of DIR (.dockerignore applies); root's unless
                             --chown names another user. ADD of local files too
  ENV KEY=VALUE...            $NAME expands what earlier ENV lines set
  WORKDIR dir, USER name      also the template's sandboxes' defaults
  CMD / ENTRYPOINT            the start command of every sandbox of the template
  # tupper:ready command      a comment line: the start command's ready check,
                             run until it succeeds before a create returns
  EXPOSE                      ignored: every port of a sandbox is reachable
Anything else (ARG, LABEL, a second FROM, ADD of URLs or archives, RUN --mount,
heredocs…) is refused with its line.`,
		Example: `  tupper template build --name my-app .
  tupper create --template my-app`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.dir = "."
			if len(args) == 1 {
				o.dir = args[0]
			}
			return runTemplateBuild(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.name, "name", "", "template name, or name:tag (default: DIR's name)")
	f.StringVarP(&o.file, "file", "f", "", "the Dockerfile (default DIR/tupper.Dockerfile, else DIR/Dockerfile)")
	f.Float64Var(&o.cpus, "cpu", 0, "CPU cores of the build and of the template's sandboxes (default: the daemon's)")
	f.Float64Var(&o.cpus, "cpus", 0, "the same as --cpu")
	_ = f.MarkHidden("cpus")
	f.IntVar(&o.memoryMB, "memory", 0, "memory in MB of the build and of the template's sandboxes (default: the daemon's)")
	f.BoolVar(&o.noCache, "no-cache", false, "run every step again, whatever earlier builds left")
	f.BoolVar(&o.json, "json", false, "write the log and the result as JSON lines on standard output")
	addAPIFlags(cmd, &o.api)
	return cmd
}

// dockerfilePath finds the Dockerfile of o: --file, else
// DIR/tupper.Dockerfile, else DIR/Dockerfile.
func (o *templateBuildOptions) dockerfilePath() (string, error) {
	if o.file != "" {
		return o.file, nil
	}
	for _, name := range []string{"tupper.Dockerfile", "Dockerfile"} {
		p := filepath.Join(o.dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("no tupper.Dockerfile or Dockerfile in %s: give one with --file: %w", o.dir, errdefs.ErrInvalidArgument)
}

// nameInvalid matches what a template name may not hold.
var nameInvalid = regexp.MustCompile(`[^a-z0-9._-]+`)

// defaultTemplateName makes a template name of directory dir's name.
func defaultTemplateName(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	name := strings.Trim(nameInvalid.ReplaceAllString(strings.ToLower(filepath.Base(abs)), "-"), "._-")
	if name == "" {
		return "", fmt.Errorf("cannot make a template name of the directory %s: give one with --name: %w", abs, errdefs.ErrInvalidArgument)
	}
	return name, nil
}

// templateBuildLine is a line of `template build --json`: a line of the
// log, the result, or the failure.
type templateBuildLine struct {
	Type        string    `json:"type"` // "log", "result" or "error"
	Timestamp   time.Time `json:"timestamp,omitzero"`
	Level       string    `json:"level,omitempty"`
	Message     string    `json:"message,omitempty"`
	TemplateID  string    `json:"templateID,omitempty"`
	BuildID     string    `json:"buildID,omitempty"`
	Name        string    `json:"name,omitempty"`
	Step        string    `json:"step,omitempty"`
	Instruction string    `json:"instruction,omitempty"`
	// Line is the Dockerfile's line of the failing step, "file:n".
	Line string `json:"line,omitempty"`
}

func runTemplateBuild(ctx context.Context, g *globals, o *templateBuildOptions) error {
	path, err := o.dockerfilePath()
	if err != nil {
		return err
	}
	name := o.name
	if name == "" {
		if name, err = defaultTemplateName(o.dir); err != nil {
			return err
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	df, err := parseDockerfile(f, path, o.dir)
	f.Close()
	if err != nil {
		return err
	}
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(g.stdout)
	progressTo := g.stderr
	if o.json {
		progressTo = g.stdout
	}
	pr := progress.New(progressTo, progress.FormatFor(progressTo, o.json))
	defer pr.Close()
	task := pr.Start("template", name)
	opts := []sdk.BuildOption{
		sdk.WithBuildCPUs(o.cpus), sdk.WithBuildMemoryMB(o.memoryMB),
		sdk.WithOnBuildLog(func(l sdk.TemplateLogEntry) {
			if o.json {
				enc.Encode(templateBuildLine{Type: "log", Timestamp: l.Time.UTC(), Level: l.Level, Message: l.Message})
			} else {
				pr.Println(l.Message)
			}
			if n, total, step, ok := buildStep(l.Message); ok {
				task.Step(n, total, step)
			}
		}),
	}
	if o.noCache {
		opts = append(opts, sdk.WithSkipCache())
	}
	build, err := r.BuildTemplate(ctx, df.tpl, name, opts...)
	if err != nil {
		task.Fail(err)
	} else {
		task.Done(build.TemplateID)
	}
	var failed *sdk.TemplateBuildError
	switch {
	case errors.As(err, &failed):
		line := ""
		if n, ok := failed.StepNumber(); ok && n <= len(df.lines) {
			line = fmt.Sprintf("%s:%d", path, df.lines[n-1])
		}
		if o.json {
			enc.Encode(templateBuildLine{
				Type: "error", TemplateID: failed.TemplateID, BuildID: failed.BuildID, Name: name,
				Step: failed.Step, Instruction: failed.Instruction, Line: line, Message: failed.Message,
			})
		}
		if line != "" {
			return fmt.Errorf("%s: %w", line, err)
		}
		return err
	case errdefs.IsNotSupported(err):
		return fmt.Errorf("%w (does tupper serve at %s build templates?)", err, r.url)
	case err != nil:
		return r.control(err, "")
	}
	if o.json {
		return enc.Encode(templateBuildLine{Type: "result", TemplateID: build.TemplateID, BuildID: build.BuildID, Name: name})
	}
	fmt.Fprintf(g.stderr, "Built template %s (%s, build %s): start sandboxes of it with `tupper create --template %s`\n", name, build.TemplateID, build.BuildID, name)
	_, err = fmt.Fprintln(g.stdout, build.TemplateID)
	return err
}

// buildStepLine is how a build's log starts each step: "[2/4] COPY app
// /srv/app", or "CACHED [2/4] …" for a step the cache had.
var buildStepLine = regexp.MustCompile(`^(CACHED )?\[(\d+)/(\d+)\] (.+)$`)

// buildStep reads the step a line of a build's log starts: its number,
// the number of steps, and its name ("COPY app /srv/app (cached)").
func buildStep(msg string) (n, total int, name string, ok bool) {
	m := buildStepLine.FindStringSubmatch(msg)
	if m == nil {
		return 0, 0, "", false
	}
	n, _ = strconv.Atoi(m[2])
	total, _ = strconv.Atoi(m[3])
	name = m[4]
	if m[1] != "" {
		name += " (cached)"
	}
	return n, total, name, n > 0 && n <= total
}

type templateLsOptions struct {
	api  apiOptions
	json bool
}

func newTemplateLsCmd(g *globals) *cobra.Command {
	o := &templateLsOptions{}
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your team's templates, oldest first",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTemplateLs(cmd.Context(), g, o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print a JSON array")
	addAPIFlags(cmd, &o.api)
	return cmd
}

// templateJSON is how `template ls --json` prints a template: the API's
// field names.
type templateJSON struct {
	TemplateID  string    `json:"templateID"`
	Names       []string  `json:"names"`
	BuildID     string    `json:"buildID"`
	BuildStatus string    `json:"buildStatus"`
	BuildCount  int       `json:"buildCount"`
	CPUCount    int       `json:"cpuCount"`
	MemoryMB    int       `json:"memoryMB"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

func runTemplateLs(ctx context.Context, g *globals, o *templateLsOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	list, err := r.ListTemplates(ctx)
	if err != nil {
		return r.control(err, "")
	}
	if o.json {
		out := make([]templateJSON, 0, len(list))
		for _, t := range list {
			names := t.Names
			if names == nil {
				names = []string{}
			}
			out = append(out, templateJSON{
				TemplateID: t.TemplateID, Names: names, BuildID: t.BuildID, BuildStatus: t.BuildStatus, BuildCount: t.BuildCount,
				CPUCount: t.CPUCount, MemoryMB: t.MemoryMB, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
			})
		}
		return printJSON(g.stdout, out)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTEMPLATE ID\tLAST BUILD\tBUILDS\tUPDATED")
	for _, t := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", orDash(strings.Join(t.Names, ",")), t.TemplateID, t.BuildStatus, t.BuildCount, t.UpdatedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func newTemplateRmCmd(g *globals) *cobra.Command { return newEachCmd(g, templateRmSpec()) }

// templateRmSpec is `tupper template rm`.
func templateRmSpec() eachSpec {
	return eachSpec{
		use:     "rm NAME|ID...",
		short:   "Delete templates; sandboxes running on one run on",
		do:      func(ctx context.Context, r *remote, ref string) error { return r.DeleteTemplate(ctx, ref) },
		explain: notFoundHint("template"),
	}
}
