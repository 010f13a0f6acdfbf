package local

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"sync"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
	"github.com/lightbearco/tupper/template"
)

// The runtime builds templates in-process with a template.Builder under
// Root/templates, made at the first template call: `tupper serve` runs a
// builder of its own on the same directory, and must not find a second
// one there with a catalog of its own. Calls that carry no engine scope
// act for engine.DefaultTeam, the team of the daemon's first key.

// templates is the runtime's builder, made once.
type templates struct {
	once sync.Once
	b    *template.Builder
	err  error
}

var _ sdk.TemplateTransport = (*Runtime)(nil)

// builder returns the runtime's template builder, making it on first use.
func (r *Runtime) builder() (*template.Builder, error) {
	r.tpl.once.Do(func() {
		r.tpl.b, r.tpl.err = template.New(template.Config{
			Root: filepath.Join(r.root, "templates"), Engine: r.engine, Images: r.images,
			Sandboxes: &sdk.Client{Transport: r}, Logger: r.log,
		})
	})
	return r.tpl.b, r.tpl.err
}

// closeTemplates stops the builds under way, which end as failed.
func (r *Runtime) closeTemplates() error {
	// From now on no builder is made: Do waits for a making under way,
	// or makes none.
	r.tpl.once.Do(func() {})
	if r.tpl.b == nil {
		return nil
	}
	return r.tpl.b.Close()
}

// teamOf is the team a call acts for.
func teamOf(ctx context.Context) string {
	if sc, ok := engine.ScopeFrom(ctx); ok && sc.Team != "" {
		return sc.Team
	}
	return engine.DefaultTeam
}

// RequestTemplateBuild implements sdk.TemplateTransport.
func (r *Runtime) RequestTemplateBuild(ctx context.Context, req sdk.TemplateBuildRequest) (*sdk.TemplateBuild, error) {
	b, err := r.builder()
	if err != nil {
		return nil, err
	}
	t, bd, err := b.RequestBuild(ctx, template.Request{Team: teamOf(ctx), Name: req.Name, Tags: req.Tags, CPUs: req.CPUs, MemoryMB: req.MemoryMB})
	if err != nil {
		return nil, err
	}
	return &sdk.TemplateBuild{TemplateID: t.ID, BuildID: bd.ID, Name: req.Name, Tags: bd.Tags}, nil
}

// UploadTemplateFiles implements sdk.TemplateTransport.
func (r *Runtime) UploadTemplateFiles(ctx context.Context, templateID, hash string, archive func() (io.ReadCloser, int64, error)) (bool, error) {
	b, err := r.builder()
	if err != nil {
		return false, err
	}
	team := teamOf(ctx)
	if _, err := b.Get(team, templateID); err != nil {
		return false, err
	}
	_, present, err := b.UploadPath(team, hash)
	if err != nil || present {
		return false, err
	}
	rc, _, err := archive()
	if err != nil {
		return false, err
	}
	defer rc.Close()
	if err := b.PutUpload(team, hash, rc); err != nil {
		return false, err
	}
	return true, nil
}

// StartTemplateBuild implements sdk.TemplateTransport.
func (r *Runtime) StartTemplateBuild(ctx context.Context, templateID, buildID string, spec *sdk.TemplateSpec) error {
	b, err := r.builder()
	if err != nil {
		return err
	}
	s := template.Spec{
		FromImage: spec.FromImage, FromTemplate: spec.FromTemplate, StartCmd: spec.StartCmd, ReadyCmd: spec.ReadyCmd,
		Force: spec.Force, Steps: make([]template.Step, len(spec.Steps)),
	}
	for i, st := range spec.Steps {
		s.Steps[i] = template.Step{Type: st.Type, Args: slices.Clone(st.Args), Force: st.Force, FilesHash: st.FilesHash}
	}
	return b.StartBuild(ctx, teamOf(ctx), templateID, buildID, s)
}

// TemplateBuildStatus implements sdk.TemplateTransport.
func (r *Runtime) TemplateBuildStatus(ctx context.Context, templateID, buildID string, logsOffset int) (*sdk.TemplateBuildStatus, error) {
	b, err := r.builder()
	if err != nil {
		return nil, err
	}
	bd, err := b.Status(teamOf(ctx), templateID, buildID, logsOffset)
	if err != nil {
		return nil, err
	}
	st := &sdk.TemplateBuildStatus{TemplateID: templateID, BuildID: bd.ID, Status: bd.Status}
	for _, l := range bd.Logs {
		st.Logs = append(st.Logs, sdk.TemplateLogEntry{Time: l.Timestamp, Level: l.Level, Message: l.Message})
	}
	if bd.Reason != nil {
		st.FailedStep, st.Reason = bd.Reason.Step, bd.Reason.Message
	}
	return st, nil
}

// TemplateExists implements sdk.TemplateTransport: as the API's alias
// check, a name any team holds exists once a build of it is ready.
func (r *Runtime) TemplateExists(ctx context.Context, name string) (bool, error) {
	b, err := r.builder()
	if err != nil {
		return false, err
	}
	t, err := b.Get("", name)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(t.Builds, func(bd *template.Build) bool { return bd.Status == template.StatusReady }), nil
}

// ListTemplates implements sdk.TemplateTransport.
func (r *Runtime) ListTemplates(ctx context.Context) ([]sdk.TemplateInfo, error) {
	b, err := r.builder()
	if err != nil {
		return nil, err
	}
	var out []sdk.TemplateInfo
	for _, t := range b.List(teamOf(ctx)) {
		out = append(out, templateInfo(t))
	}
	return out, nil
}

// DeleteTemplate implements sdk.TemplateTransport.
func (r *Runtime) DeleteTemplate(ctx context.Context, ref string) error {
	b, err := r.builder()
	if err != nil {
		return err
	}
	return b.Delete(ctx, teamOf(ctx), ref)
}

// templateInfo describes t as the API's listing does.
func templateInfo(t *template.Template) sdk.TemplateInfo {
	info := sdk.TemplateInfo{
		TemplateID: t.ID, Names: t.Names, BuildCount: len(t.Builds), CPUCount: max(1, int(t.CPUs+0.5)),
		MemoryMB: t.MemoryMB, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, BuildStatus: template.StatusWaiting,
	}
	if n := len(t.Builds); n > 0 {
		info.BuildID, info.BuildStatus = t.Builds[n-1].ID, t.Builds[n-1].Status
	}
	for _, bd := range t.Builds {
		if bd.Status == template.StatusReady {
			info.BuildID = bd.ID
		}
	}
	return info
}
