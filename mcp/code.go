package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/sdk"
)

// run_code runs code in the sandbox's code interpreter when it has one
// (sandboxes of the code-interpreter template): state carries over between
// runs, and rich results (plots, tables) come back, images as image
// content. Elsewhere, and when the call names a cwd or a user, which the
// interpreter's contexts do not take, it writes the code to a file and
// runs python3 or node on it.

// codeLanguages are run_code's languages and what each is called in the
// interpreter.
var codeLanguages = map[string]string{
	"python":     sdk.LanguagePython,
	"javascript": sdk.LanguageJavaScript,
	"node":       sdk.LanguageJavaScript,
	"typescript": sdk.LanguageTypeScript,
	"bash":       sdk.LanguageBash,
}

// oneOffRunners maps the languages that run without the interpreter to the
// program that runs a snippet file and the file's extension.
var oneOffRunners = map[string]struct{ program, ext string }{
	sdk.LanguagePython:     {"python3", ".py"},
	sdk.LanguageJavaScript: {"node", ".js"},
}

type runCodeIn struct {
	Sandbox        string            `json:"sandbox" jsonschema:"Id of the sandbox"`
	Language       string            `json:"language,omitempty" jsonschema:"Language of the code (default python). typescript and bash need the code interpreter (sandboxes of the code-interpreter template); elsewhere python runs with python3 and javascript with node"`
	Code           string            `json:"code" jsonschema:"The code to run"`
	ContextID      string            `json:"context_id,omitempty" jsonschema:"Run in this code context (made with the SDK's CreateCodeContext) instead of the language's default one; its language applies, so leave language out"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"Environment variables added for this run"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"Working directory. Setting it (or user) runs the code as a one-off python3 or node process, without the interpreter's state"`
	User           string            `json:"user,omitempty" jsonschema:"User to run as: user (the default) or root. Setting it runs the code as a one-off process, like cwd"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"Interrupt the run after this many seconds; default 50"`
}

type codeResultOut struct {
	IsMainResult bool     `json:"is_main_result" jsonschema:"Whether this is the value of the code's last expression, rather than something it displayed on the way"`
	Formats      []string `json:"formats" jsonschema:"The formats the result came in, such as text, html, png"`
	Text         string   `json:"text,omitempty" jsonschema:"Plain-text rendering"`
	HTML         string   `json:"html,omitempty" jsonschema:"HTML rendering, such as a DataFrame's table"`
	Markdown     string   `json:"markdown,omitempty" jsonschema:"Markdown rendering"`
	LaTeX        string   `json:"latex,omitempty" jsonschema:"LaTeX rendering"`
	JSON         string   `json:"json,omitempty" jsonschema:"A JSON result, as JSON text"`
	Chart        string   `json:"chart,omitempty" jsonschema:"What a plot shows (type, title, elements), as JSON text"`
	Image        string   `json:"image,omitempty" jsonschema:"MIME type of the image this result returned as image content beside the text (image/png or image/jpeg)"`
	Note         string   `json:"note,omitempty" jsonschema:"Why a part of the result is not shown, such as an image over the size limit"`
}

type runCodeOut struct {
	Language       string          `json:"language" jsonschema:"The language run"`
	Interpreter    bool            `json:"interpreter" jsonschema:"Whether the code ran in the code interpreter, which keeps state between runs, rather than as a one-off process"`
	ContextID      string          `json:"context_id,omitempty" jsonschema:"The code context it ran in, when one was named"`
	ExitCode       int             `json:"exit_code" jsonschema:"The process's exit code; in the interpreter 1 when the code raised an error, else 0"`
	Stdout         string          `json:"stdout" jsonschema:"Standard output, cut to the output limit"`
	Stderr         string          `json:"stderr" jsonschema:"Standard error, cut to the output limit"`
	Error          string          `json:"error,omitempty" jsonschema:"The error the code ended with, such as ZeroDivisionError: division by zero; empty on success"`
	Traceback      string          `json:"traceback,omitempty" jsonschema:"The error's traceback (interpreter only)"`
	Results        []codeResultOut `json:"results,omitempty" jsonschema:"Rich results (interpreter only): what the code displayed, and the value of its last expression"`
	ExecutionCount int             `json:"execution_count,omitempty" jsonschema:"The run's number in its context (interpreter only)"`
}

var codeLanguageEnum = []any{"python", "javascript", "typescript", "bash", "node"}

func (t *tools) registerCode(s *mcpsdk.Server) {
	addTool(s, t, &mcpsdk.Tool{
		Name:  "run_code",
		Title: "Run code",
		Description: "Run code in a sandbox and return its stdout, stderr, results and the error it ended with, if any. " +
			"In sandboxes of the code-interpreter template it runs in a stateful interpreter, like a notebook: variables and imports carry over between runs, " +
			"the last expression's value comes back, and plots come back as images; python, javascript, typescript and bash. " +
			"Elsewhere python and javascript run as one-off processes without state: write files to keep it.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: yes, OpenWorldHint: yes},
	}, map[string][]any{"language": codeLanguageEnum}, t.runCode)
}

// interpreterContexts returns the contexts of the sandbox's code
// interpreter, and false when it has none. It decides, before any code
// runs, where run_code runs it, so that a failure half way through a run
// never makes it run twice.
func interpreterContexts(ctx context.Context, sb *sdk.Sandbox) ([]sdk.CodeContext, bool, error) {
	list, err := sb.ListCodeContexts(ctx)
	switch {
	case err == nil:
		return list, true, nil
	case sdk.IsUnavailable(err) && ctx.Err() == nil:
		// The daemon answers 502 for a port nothing listens on.
		return nil, false, nil
	}
	return nil, false, err
}

func (t *tools) runCode(ctx context.Context, in runCodeIn) (*mcpsdk.CallToolResult, runCodeOut, error) {
	var out runCodeOut
	lang := "python"
	if in.Language != "" {
		lang = strings.ToLower(strings.TrimSpace(in.Language))
	}
	ilang, ok := codeLanguages[lang]
	if !ok {
		return nil, out, errArgument("language %q: use python, javascript, typescript or bash", in.Language)
	}
	switch {
	case strings.TrimSpace(in.Code) == "":
		return nil, out, errArgument("code is empty")
	case in.TimeoutSeconds < 0:
		return nil, out, errArgument("timeout_seconds must not be negative")
	case in.ContextID != "" && in.Language != "":
		return nil, out, errArgument("give context_id or language, not both: the context has its language")
	case in.ContextID != "" && (in.Cwd != "" || in.User != ""):
		return nil, out, errArgument("cwd and user do not apply to a code context, whose cwd was set when it was made")
	}
	sb, err := t.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	timeout := time.Duration(in.TimeoutSeconds) * time.Second
	if timeout == 0 {
		timeout = DefaultCommandTimeout
	}
	oneOff := in.Cwd != "" || in.User != ""
	if !oneOff {
		contexts, has, err := interpreterContexts(ctx, sb)
		if err != nil {
			return nil, out, explain(ctx, "reach the code interpreter", sb.ID(), err)
		}
		if has && in.ContextID != "" {
			i := slices.IndexFunc(contexts, func(c sdk.CodeContext) bool { return c.ID == in.ContextID })
			if i < 0 {
				return nil, out, errContextNotFound(in.ContextID, sb.ID())
			}
			ilang = contexts[i].Language
		}
		if has {
			return t.runInInterpreter(ctx, sb, ilang, in, timeout)
		}
		if in.ContextID != "" {
			return nil, out, noInterpreter(sb.ID())
		}
	}
	runner, ok := oneOffRunners[ilang]
	switch {
	case !ok && oneOff:
		return nil, out, errArgument("cwd and user run the code as a one-off process, which does python and javascript only; leave them out to use the code interpreter")
	case !ok && ilang == sdk.LanguageBash:
		return nil, out, fmt.Errorf("bash code needs the code interpreter, which sandbox %q does not have: use run_command, or a sandbox of the code-interpreter template (create_sandbox with template code-interpreter)", sb.ID())
	case !ok:
		return nil, out, fmt.Errorf("%s needs the code interpreter, which sandbox %q does not have: without it run_code does python and javascript only; create a sandbox of the code-interpreter template (create_sandbox with template code-interpreter)", ilang, sb.ID())
	}
	return t.runOneOff(ctx, sb, ilang, runner.program, runner.ext, in, timeout)
}

// errContextNotFound is the error of a run in a context that does not exist.
func errContextNotFound(id, sandbox string) error {
	return fmt.Errorf("code context %q not found in sandbox %q: it was never made there or was removed; leave context_id out to use the language's default context", id, sandbox)
}

// noInterpreter is the error of a call that needs the code interpreter
// on a sandbox without one.
func noInterpreter(id string) error {
	return fmt.Errorf("sandbox %q has no code interpreter, so it has no code contexts: create_sandbox with template code-interpreter makes a sandbox that has one", id)
}

func (t *tools) runInInterpreter(ctx context.Context, sb *sdk.Sandbox, lang string, in runCodeIn, timeout time.Duration) (*mcpsdk.CallToolResult, runCodeOut, error) {
	opts := []sdk.RunCodeOption{sdk.WithCodeTimeout(timeout)}
	if in.ContextID != "" {
		opts = append(opts, sdk.WithCodeContext(in.ContextID))
	} else {
		opts = append(opts, sdk.WithLanguage(lang))
	}
	if len(in.Env) > 0 {
		opts = append(opts, sdk.WithCodeEnv(in.Env))
	}
	exec, err := sb.RunCode(ctx, in.Code, opts...)
	switch {
	case sdk.IsDeadlineExceeded(err) && exec != nil && ctx.Err() == nil:
		stdout, _ := capHeadTail(strings.Join(exec.Logs.Stdout, ""), t.cfg.OutputLimit)
		stderr, _ := capHeadTail(strings.Join(exec.Logs.Stderr, ""), t.cfg.OutputLimit)
		return nil, runCodeOut{}, fmt.Errorf("the code timed out after %v and was interrupted (its context keeps its state): rerun it with a larger timeout_seconds, or start it in the background with run_command\n%s",
			timeout, renderOutput(stdout, stderr))
	case sdk.IsNotFound(err) && in.ContextID != "":
		return nil, runCodeOut{}, errContextNotFound(in.ContextID, sb.ID())
	case err != nil:
		return nil, runCodeOut{}, explain(ctx, "run the code", sb.ID(), err)
	}
	out := runCodeOut{Language: lang, Interpreter: true, ContextID: in.ContextID, ExecutionCount: exec.ExecutionCount}
	out.Stdout, _ = capHeadTail(strings.Join(exec.Logs.Stdout, ""), t.cfg.OutputLimit)
	out.Stderr, _ = capHeadTail(strings.Join(exec.Logs.Stderr, ""), t.cfg.OutputLimit)
	if e := exec.Error; e != nil {
		out.ExitCode = 1
		out.Error = e.Error()
		out.Traceback, _ = capHeadTail(e.Traceback, t.cfg.OutputLimit)
	}

	var text []string
	if s := renderOutput(out.Stdout, out.Stderr); s != "" {
		text = append(text, s)
	}
	var images []mcpsdk.Content
	for _, r := range exec.Results {
		ro := t.resultView(r)
		var lines []string
		if ro.Text != "" {
			lines = append(lines, strings.TrimSuffix(ro.Text, "\n"))
		}
		if data, mime := resultImage(r); mime != "" {
			if len(data) > t.cfg.ImageLimit {
				ro.Note = fmt.Sprintf("the %s image (%d bytes) is over the image limit of %d bytes and is not returned", mime, len(data), t.cfg.ImageLimit)
				lines = append(lines, "("+ro.Note+")")
			} else {
				ro.Image = mime
				images = append(images, &mcpsdk.ImageContent{Data: data, MIMEType: mime})
				lines = append(lines, fmt.Sprintf("(%s image, %d bytes, returned as image content)", mime, len(data)))
			}
		}
		if len(lines) == 0 {
			lines = append(lines, "(formats: "+strings.Join(ro.Formats, ", ")+")")
		}
		head := "--- display ---"
		if r.IsMainResult {
			head = "--- result ---"
		}
		text = append(text, head+"\n"+strings.Join(lines, "\n"))
		out.Results = append(out.Results, ro)
	}
	if e := exec.Error; e != nil {
		tb := out.Traceback
		if tb == "" {
			tb = out.Error
		}
		text = append(text, "--- error ---\n"+strings.TrimSuffix(tb, "\n"))
	}
	res := textResult("(no output)")
	if len(text) > 0 {
		res = textResult(strings.Join(text, "\n"))
	}
	res.Content = append(res.Content, images...)
	return res, out, nil
}

// resultView is a result as run_code reports it, each text cut to the
// output limit. Images are not in it: they go as image content.
func (t *tools) resultView(r sdk.Result) codeResultOut {
	limit := func(s string) string {
		s, _ = capHeadTail(s, t.cfg.OutputLimit)
		return s
	}
	formats := r.Formats()
	if formats == nil {
		formats = []string{}
	}
	return codeResultOut{
		IsMainResult: r.IsMainResult,
		Formats:      formats,
		Text:         limit(r.Text),
		HTML:         limit(r.HTML),
		Markdown:     limit(r.Markdown),
		LaTeX:        limit(r.LaTeX),
		JSON:         limit(string(r.JSON)),
		Chart:        limit(string(r.Chart)),
	}
}

// resultImage returns a result's image and its MIME type, PNG first, or
// "" when it has none.
func resultImage(r sdk.Result) ([]byte, string) {
	switch {
	case len(r.PNG) > 0:
		return r.PNG, "image/png"
	case len(r.JPEG) > 0:
		return r.JPEG, "image/jpeg"
	}
	return nil, ""
}

// runOneOff writes the code to a file and runs program on it.
func (t *tools) runOneOff(ctx context.Context, sb *sdk.Sandbox, lang, program, ext string, in runCodeIn, timeout time.Duration) (*mcpsdk.CallToolResult, runCodeOut, error) {
	var out runCodeOut
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	file := "/tmp/tupper-run-" + hex.EncodeToString(rnd[:]) + ext
	if _, err := sb.Files.Write(ctx, file, []byte(in.Code), fileOptions(in.User)...); err != nil {
		return nil, out, explain(ctx, "write the code to "+file, sb.ID(), err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := sb.Files.Remove(rctx, file, fileOptions(in.User)...); err != nil && !sdk.IsNotFound(err) {
			t.log.Warn("remove snippet file", "sandbox", sb.ID(), "file", file, "err", err)
		}
	}()
	res, err := t.runForeground(ctx, sb, program+" "+file, commandOptions(in.Cwd, in.User, in.Env, timeout), timeout)
	if err != nil {
		return nil, out, err
	}
	if res.ExitCode == 127 && strings.Contains(res.Stderr, program) {
		return nil, out, fmt.Errorf("%s is not installed in sandbox %q: create a sandbox from a template that has it (base has python3 and node)", program, sb.ID())
	}
	out = runCodeOut{Language: lang, ExitCode: res.ExitCode}
	out.Stdout, _ = capHeadTail(res.Stdout, t.cfg.OutputLimit)
	out.Stderr, _ = capHeadTail(res.Stderr, t.cfg.OutputLimit)
	if res.ExitCode != 0 || res.Error != "" {
		out.Error = codeError(res.Stderr, res.ExitCode, res.Error)
	}
	text := renderOutput(out.Stdout, out.Stderr)
	if out.Error != "" {
		text = strings.TrimPrefix(text+"\nerror: "+out.Error, "\n")
	}
	if text == "" {
		text = "(no output)"
	}
	return textResult(text), out, nil
}

// codeError picks the line of stderr that names the error a snippet ended
// with: the last line that mentions an error or exception (Python's
// "ZeroDivisionError: division by zero", node's "TypeError: …"), else the
// last line, else the exit status.
func codeError(stderr string, exitCode int, how string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.Contains(l, "Error") || strings.Contains(l, "Exception") {
			return l
		}
	}
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	if how != "" {
		return fmt.Sprintf("exit code %d (%s)", exitCode, how)
	}
	return fmt.Sprintf("exit code %d", exitCode)
}
