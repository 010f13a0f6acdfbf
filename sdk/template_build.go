package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// TemplateTransport is a Transport that builds templates, through E2B's
// template API or in-process. Without it, Client.BuildTemplate,
// TemplateExists, ListTemplates and DeleteTemplate fail with
// errdefs.ErrNotSupported.
type TemplateTransport interface {
	// RequestTemplateBuild finds or makes the template req names and adds
	// a build of it, waiting for its steps.
	RequestTemplateBuild(ctx context.Context, req TemplateBuildRequest) (*TemplateBuild, error)
	// UploadTemplateFiles sends the archive of a COPY step's files, named
	// by hash, for template templateID, unless the server has it already,
	// and reports whether it sent it. It calls archive, which returns a
	// gzipped tar and its size, only to send it, and closes what archive
	// returned.
	UploadTemplateFiles(ctx context.Context, templateID, hash string, archive func() (io.ReadCloser, int64, error)) (bool, error)
	// StartTemplateBuild starts build buildID of template templateID on
	// spec. It returns once the build has started, which goes on in the
	// server whatever ctx does.
	StartTemplateBuild(ctx context.Context, templateID, buildID string, spec *TemplateSpec) error
	// TemplateBuildStatus returns the build's state and its log from entry
	// logsOffset on.
	TemplateBuildStatus(ctx context.Context, templateID, buildID string, logsOffset int) (*TemplateBuildStatus, error)
	// TemplateExists reports whether a template has name with a finished
	// build (another team's counts: the name is taken).
	TemplateExists(ctx context.Context, name string) (bool, error)
	ListTemplates(ctx context.Context) ([]TemplateInfo, error)
	// DeleteTemplate deletes the template ref names (an id or a name);
	// sandboxes that run on it run on.
	DeleteTemplate(ctx context.Context, ref string) error
}

// TemplateBuildRequest asks for a build of the template Name ("name" or
// "name:tag"), tagged with Tags too; CPUs and MemoryMB, when not zero,
// become the template's sandboxes' defaults.
type TemplateBuildRequest struct {
	Name     string
	Tags     []string
	CPUs     float64
	MemoryMB int
}

// TemplateBuild names a build of a template.
type TemplateBuild struct {
	TemplateID string
	BuildID    string
	// Name is the name the build was asked for; Tags the tags it gets.
	Name string
	Tags []string
}

// The states of a template build, as E2B's template API names them.
const (
	TemplateStatusWaiting  = "waiting"
	TemplateStatusBuilding = "building"
	TemplateStatusReady    = "ready"
	TemplateStatusError    = "error"
)

// TemplateBuildStatus is the state of a build, with a part of its log.
type TemplateBuildStatus struct {
	TemplateID string
	BuildID    string
	// Status is one of TemplateStatusWaiting, TemplateStatusBuilding,
	// TemplateStatusReady and TemplateStatusError.
	Status string
	Logs   []TemplateLogEntry
	// FailedStep and Reason say where and why a failed build failed;
	// see TemplateBuildError.Step.
	FailedStep string
	Reason     string
}

// TemplateLogEntry is a line of a build's log.
type TemplateLogEntry struct {
	Time    time.Time
	Level   string
	Message string
}

// TemplateInfo describes a template.
type TemplateInfo struct {
	TemplateID string
	// Names are what CreateOptions.Template may name it by.
	Names []string
	// BuildID is its newest ready build, else its newest build;
	// BuildStatus the newest build's state; BuildCount its builds.
	BuildID     string
	BuildStatus string
	BuildCount  int
	// CPUCount and MemoryMB are its sandboxes' defaults.
	CPUCount  int
	MemoryMB  int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// TemplateBuildError is the error of a build that ran and failed. Use
// errors.As to reach it.
type TemplateBuildError struct {
	TemplateID string
	BuildID    string
	// Step is where the build failed: "1" for the template's first step,
	// "base" for its base, "finalize" for the making and check of the
	// result (its start command); empty when the server does not say.
	Step string
	// Instruction is the failing step as the template has it ("RUN make"),
	// when Step numbers one.
	Instruction string
	// Message is the server's reason.
	Message string
}

func (e *TemplateBuildError) Error() string {
	at := ""
	switch {
	case e.Instruction != "":
		at = fmt.Sprintf(" at step %s (%s)", e.Step, e.Instruction)
	case e.Step != "":
		at = " at step " + e.Step
	}
	return fmt.Sprintf("build %s of template %s failed%s: %s", e.BuildID, e.TemplateID, at, e.Message)
}

// StepNumber returns the number of the failing step, counted from 1, and
// whether the build failed at one of the template's steps.
func (e *TemplateBuildError) StepNumber() (int, bool) {
	n, err := strconv.Atoi(e.Step)
	return n, err == nil && n > 0
}

// IsTemplateBuildError reports whether err is a *TemplateBuildError:
// the build ran, and one of its steps failed.
func IsTemplateBuildError(err error) bool {
	var e *TemplateBuildError
	return errors.As(err, &e)
}

// BuildOption is a per-call option of Client.BuildTemplate.
type BuildOption func(*buildOptions)

type buildOptions struct {
	tags      []string
	cpus      float64
	memoryMB  int
	skipCache bool
	onLog     func(TemplateLogEntry)
}

// WithBuildTags tags the build with tags too ("v2", "stable"): creates
// name it as "name:tag".
func WithBuildTags(tags ...string) BuildOption {
	return func(o *buildOptions) { o.tags = append(o.tags, tags...) }
}

// WithBuildCPUs gives the build's sandbox cpus cores, and makes that the
// default of the template's sandboxes.
func WithBuildCPUs(cpus float64) BuildOption {
	return func(o *buildOptions) { o.cpus = cpus }
}

// WithBuildMemoryMB gives the build's sandbox mb MB of memory, and makes
// that the default of the template's sandboxes.
func WithBuildMemoryMB(mb int) BuildOption {
	return func(o *buildOptions) { o.memoryMB = mb }
}

// WithSkipCache runs every step again, whatever earlier builds left.
func WithSkipCache() BuildOption {
	return func(o *buildOptions) { o.skipCache = true }
}

// WithOnBuildLog calls fn with each line of the build's log as it comes:
// the SDK's own (requests, uploads) and the server's (steps, their
// output, CACHED steps). Calls come one at a time, on BuildTemplate's
// goroutine.
func WithOnBuildLog(fn func(TemplateLogEntry)) BuildOption {
	return func(o *buildOptions) { o.onLog = fn }
}

// buildPollInterval is how often BuildTemplate asks for the build's state,
// as E2B's SDK does.
const buildPollInterval = 200 * time.Millisecond

func (c *Client) templateTransport(op string) (TemplateTransport, error) {
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	tt, ok := t.(TemplateTransport)
	if !ok {
		return nil, fmt.Errorf("%s: this transport builds no templates: %w", op, errdefs.ErrNotSupported)
	}
	return tt, nil
}

// BuildTemplate builds def as template name ("name" or "name:tag"), as
// E2B's Template.build does: it asks for a build, uploads the files of
// def's COPY steps the server does not have yet, starts the build and
// follows it to its end, and returns it once sandboxes can start from it
// (CreateOptions.Template: name, or the build's TemplateID). Steps an
// earlier build ran the same way come from the cache (logged as CACHED).
// A build that fails returns a *TemplateBuildError naming the step.
// Cancelling ctx stops the following, not the build, which runs on in the
// server.
func (c *Client) BuildTemplate(ctx context.Context, def *Template, name string, opts ...BuildOption) (*TemplateBuild, error) {
	o := &buildOptions{}
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	logf := func(format string, args ...any) {
		if o.onLog != nil {
			o.onLog(TemplateLogEntry{Time: time.Now(), Level: "info", Message: fmt.Sprintf(format, args...)})
		}
	}
	op := fmt.Sprintf("build template %q", name)
	if def == nil {
		def = NewTemplate()
	}
	if def.err != nil {
		return nil, fmt.Errorf("%s: %w: %w", op, def.err, errdefs.ErrInvalidArgument)
	}
	tt, err := c.templateTransport(op)
	if err != nil {
		return nil, err
	}
	spec := def.spec()
	spec.Force = spec.Force || o.skipCache
	files, err := def.copyFiles(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer files.close()

	logf("Requesting build for template: %s", name)
	build, err := tt.RequestTemplateBuild(ctx, TemplateBuildRequest{Name: name, Tags: o.tags, CPUs: o.cpus, MemoryMB: o.memoryMB})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	logf("Template created with ID: %s, Build ID: %s", build.TemplateID, build.BuildID)
	for i, st := range spec.Steps {
		if st.Type != "COPY" {
			continue
		}
		sent, err := tt.UploadTemplateFiles(ctx, build.TemplateID, st.FilesHash, files.archive(i))
		if err != nil {
			return nil, fmt.Errorf("%s: upload the files of COPY %s: %w", op, st.Args[0], err)
		}
		if sent {
			logf("Uploaded '%s'", st.Args[0])
		} else {
			logf("Skipping upload of '%s', already cached", st.Args[0])
		}
	}
	files.close()
	if err := tt.StartTemplateBuild(ctx, build.TemplateID, build.BuildID, spec); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := followBuild(ctx, tt, build, spec, o.onLog); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return build, nil
}

// followBuild polls the build's state until it ends, passing its log to
// onLog, and returns its failure.
func followBuild(ctx context.Context, tt TemplateTransport, build *TemplateBuild, spec *TemplateSpec, onLog func(TemplateLogEntry)) error {
	offset := 0
	poll := func() (*TemplateBuildStatus, error) {
		st, err := tt.TemplateBuildStatus(ctx, build.TemplateID, build.BuildID, offset)
		if err != nil {
			return nil, err
		}
		offset += len(st.Logs)
		if onLog != nil {
			for _, l := range st.Logs {
				onLog(l)
			}
		}
		return st, nil
	}
	tick := time.NewTicker(buildPollInterval)
	defer tick.Stop()
	for {
		st, err := poll()
		if err != nil {
			return err
		}
		switch st.Status {
		case TemplateStatusReady, TemplateStatusError:
			// The log's last lines may come after the state changed.
			for tail := st; len(tail.Logs) > 0; {
				if tail, err = poll(); err != nil {
					return err
				}
			}
			if st.Status == TemplateStatusReady {
				return nil
			}
			f := &TemplateBuildError{TemplateID: build.TemplateID, BuildID: build.BuildID, Step: st.FailedStep, Message: st.Reason}
			if n, ok := f.StepNumber(); ok && n <= len(spec.Steps) {
				f.Instruction = describeStep(spec.Steps[n-1])
			}
			if f.Message == "" {
				f.Message = "the server gave no reason"
			}
			return f
		case TemplateStatusWaiting, TemplateStatusBuilding:
		default:
			return fmt.Errorf("build %s: unknown state %q: %w", build.BuildID, st.Status, errdefs.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// describeStep is a step as a line of a Dockerfile would have it, short.
func describeStep(st TemplateStep) string {
	s := st.Type + " " + strings.Join(st.Args, " ")
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// templateFiles are the files of a template's COPY steps, read from its
// context directory.
type templateFiles struct {
	root    *os.Root
	entries map[int][]copyEntry // by step
}

// copyFiles lists the files of spec's COPY steps and sets their hashes.
func (t *Template) copyFiles(spec *TemplateSpec) (*templateFiles, error) {
	files := &templateFiles{entries: map[int][]copyEntry{}}
	hasCopy := false
	for _, st := range spec.Steps {
		hasCopy = hasCopy || st.Type == "COPY"
	}
	if !hasCopy {
		return files, nil
	}
	dir := t.ContextDir
	if dir == "" {
		dir = "."
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("context directory: %w", err)
	}
	files.root = root
	patterns, err := readIgnoreFile(root)
	if err != nil {
		files.close()
		return nil, fmt.Errorf("context directory: %w", err)
	}
	ignore, err := newIgnoreMatcher(append(patterns, t.IgnorePatterns...))
	if err != nil {
		files.close()
		return nil, err
	}
	for i := range spec.Steps {
		st := &spec.Steps[i]
		if st.Type != "COPY" {
			continue
		}
		entries, err := copySource(root, st.Args[0], ignore)
		if err == nil {
			st.FilesHash, err = filesHash(root, st.Args[0], st.Args[1], entries)
		}
		if err != nil {
			files.close()
			return nil, err
		}
		files.entries[i] = entries
	}
	return files, nil
}

// archive returns the function that makes the archive of step i's files.
func (f *templateFiles) archive(i int) func() (io.ReadCloser, int64, error) {
	return func() (io.ReadCloser, int64, error) {
		s, err := spoolArchive(f.root, f.entries[i])
		if err != nil {
			return nil, 0, err
		}
		return s, s.size, nil
	}
}

func (f *templateFiles) close() {
	if f.root != nil {
		f.root.Close()
		f.root = nil
	}
}

// TemplateExists reports whether a template has name and a finished build.
// A name another team holds exists too: it cannot be built here.
func (c *Client) TemplateExists(ctx context.Context, name string) (bool, error) {
	tt, err := c.templateTransport(fmt.Sprintf("template %q", name))
	if err != nil {
		return false, err
	}
	ok, err := tt.TemplateExists(ctx, name)
	if err != nil {
		return false, fmt.Errorf("template %q: %w", name, err)
	}
	return ok, nil
}

// ListTemplates returns the templates of the caller's team, oldest first.
func (c *Client) ListTemplates(ctx context.Context) ([]TemplateInfo, error) {
	tt, err := c.templateTransport("list templates")
	if err != nil {
		return nil, err
	}
	list, err := tt.ListTemplates(ctx)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return list, nil
}

// DeleteTemplate deletes the template ref names (its id or a name) and
// its builds; sandboxes that run on it run on. An unknown template is an
// error of class errdefs.ErrNotFound.
func (c *Client) DeleteTemplate(ctx context.Context, ref string) error {
	tt, err := c.templateTransport(fmt.Sprintf("delete template %q", ref))
	if err != nil {
		return err
	}
	if err := tt.DeleteTemplate(ctx, ref); err != nil {
		return fmt.Errorf("delete template %q: %w", ref, err)
	}
	return nil
}

var _ TemplateTransport = (*HTTPTransport)(nil)

func templatePath(id string, rest ...string) string {
	p := "/templates/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// RequestTemplateBuild implements TemplateTransport: POST /v3/templates.
func (t *HTTPTransport) RequestTemplateBuild(ctx context.Context, req TemplateBuildRequest) (*TemplateBuild, error) {
	body := struct {
		Name     string   `json:"name"`
		Tags     []string `json:"tags,omitempty"`
		CPUCount float64  `json:"cpuCount,omitempty"`
		MemoryMB int      `json:"memoryMB,omitempty"`
	}{req.Name, req.Tags, req.CPUs, req.MemoryMB}
	var out struct {
		TemplateID string   `json:"templateID"`
		BuildID    string   `json:"buildID"`
		Tags       []string `json:"tags"`
	}
	if _, err := t.call(ctx, http.MethodPost, "/v3/templates", nil, body, &out); err != nil {
		return nil, err
	}
	if out.TemplateID == "" || out.BuildID == "" {
		return nil, fmt.Errorf("POST /v3/templates: the answer names no template or build: %w", errdefs.ErrUnavailable)
	}
	return &TemplateBuild{TemplateID: out.TemplateID, BuildID: out.BuildID, Name: req.Name, Tags: out.Tags}, nil
}

// UploadTemplateFiles implements TemplateTransport: GET
// /templates/{id}/files/{hash} says whether the server has the files,
// and where to PUT them when it has not. The upload carries no API key:
// the URL is signed, and may be another server's.
func (t *HTTPTransport) UploadTemplateFiles(ctx context.Context, templateID, hash string, archive func() (io.ReadCloser, int64, error)) (bool, error) {
	var link struct {
		Present bool              `json:"present"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
	}
	if _, err := t.call(ctx, http.MethodGet, templatePath(templateID, "files", hash), nil, nil, &link); err != nil {
		return false, err
	}
	if link.Present {
		return false, nil
	}
	if link.URL == "" {
		return false, fmt.Errorf("the server has not the files, and gave no URL to upload them to: %w", errdefs.ErrUnavailable)
	}
	body, size, err := archive()
	if err != nil {
		return false, fmt.Errorf("pack the files: %w", err)
	}
	defer body.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, link.URL, body)
	if err != nil {
		return false, fmt.Errorf("upload URL: %w", err)
	}
	req.ContentLength = size
	for k, v := range link.Headers {
		if !strings.EqualFold(k, "Content-Length") {
			req.Header.Set(k, v)
		}
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return false, fromTransport(err)
	}
	defer drain(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return false, fromResponse(resp)
	}
	return true, nil
}

// StartTemplateBuild implements TemplateTransport: POST
// /v2/templates/{id}/builds/{buildID}.
func (t *HTTPTransport) StartTemplateBuild(ctx context.Context, templateID, buildID string, spec *TemplateSpec) error {
	_, err := t.call(ctx, http.MethodPost, "/v2"+templatePath(templateID, "builds", buildID), nil, spec, nil)
	return err
}

// TemplateBuildStatus implements TemplateTransport: GET
// /templates/{id}/builds/{buildID}/status?logsOffset=N.
func (t *HTTPTransport) TemplateBuildStatus(ctx context.Context, templateID, buildID string, logsOffset int) (*TemplateBuildStatus, error) {
	var out struct {
		TemplateID string `json:"templateID"`
		BuildID    string `json:"buildID"`
		Status     string `json:"status"`
		LogEntries []struct {
			Timestamp time.Time `json:"timestamp"`
			Level     string    `json:"level"`
			Message   string    `json:"message"`
		} `json:"logEntries"`
		Reason *struct {
			Message string `json:"message"`
			Step    string `json:"step"`
		} `json:"reason"`
	}
	q := url.Values{"logsOffset": {strconv.Itoa(logsOffset)}}
	if _, err := t.call(ctx, http.MethodGet, templatePath(templateID, "builds", buildID, "status"), q, nil, &out); err != nil {
		return nil, err
	}
	st := &TemplateBuildStatus{TemplateID: out.TemplateID, BuildID: out.BuildID, Status: out.Status}
	for _, l := range out.LogEntries {
		st.Logs = append(st.Logs, TemplateLogEntry{Time: l.Timestamp, Level: l.Level, Message: l.Message})
	}
	if out.Reason != nil {
		st.FailedStep, st.Reason = out.Reason.Step, out.Reason.Message
	}
	return st, nil
}

// TemplateExists implements TemplateTransport: GET
// /templates/aliases/{name}, which answers 403 for a name another team
// holds and 404 for one without a finished build.
func (t *HTTPTransport) TemplateExists(ctx context.Context, name string) (bool, error) {
	_, err := t.call(ctx, http.MethodGet, templatePath("aliases", name), nil, nil, nil)
	var e *Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &e) && e.Status == http.StatusForbidden:
		return true, nil
	case errors.As(err, &e) && e.Status == http.StatusNotFound:
		return false, nil
	}
	return false, err
}

// ListTemplates implements TemplateTransport: GET /templates.
func (t *HTTPTransport) ListTemplates(ctx context.Context) ([]TemplateInfo, error) {
	var out []struct {
		TemplateID  string    `json:"templateID"`
		Names       []string  `json:"names"`
		Aliases     []string  `json:"aliases"`
		BuildID     string    `json:"buildID"`
		BuildStatus string    `json:"buildStatus"`
		BuildCount  int       `json:"buildCount"`
		CPUCount    int       `json:"cpuCount"`
		MemoryMB    int       `json:"memoryMB"`
		CreatedAt   time.Time `json:"createdAt"`
		UpdatedAt   time.Time `json:"updatedAt"`
	}
	if _, err := t.call(ctx, http.MethodGet, "/templates", nil, nil, &out); err != nil {
		return nil, err
	}
	list := make([]TemplateInfo, 0, len(out))
	for _, o := range out {
		names := o.Names
		if len(names) == 0 {
			names = o.Aliases
		}
		list = append(list, TemplateInfo{
			TemplateID: o.TemplateID, Names: names, BuildID: o.BuildID, BuildStatus: o.BuildStatus,
			BuildCount: o.BuildCount, CPUCount: o.CPUCount, MemoryMB: o.MemoryMB, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt,
		})
	}
	return list, nil
}

// DeleteTemplate implements TemplateTransport: DELETE /templates/{ref}.
func (t *HTTPTransport) DeleteTemplate(ctx context.Context, ref string) error {
	_, err := t.call(ctx, http.MethodDelete, templatePath(ref), nil, nil, nil)
	return err
}
