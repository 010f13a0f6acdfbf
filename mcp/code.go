package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/sdk"
)

// interpreters maps run_code's languages to the program that runs a
// snippet file and the file's extension.
var interpreters = map[string]struct{ program, ext string }{
	"python":     {"python3", ".py"},
	"javascript": {"node", ".js"},
	"node":       {"node", ".js"},
}

type runCodeIn struct {
	Sandbox        string            `json:"sandbox" jsonschema:"Id of the sandbox"`
	Language       string            `json:"language" jsonschema:"Language of the snippet: python (run by python3) or javascript (run by node)"`
	Code           string            `json:"code" jsonschema:"The snippet to run"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"Environment variables added for this run"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"Working directory; default the user's home"`
	User           string            `json:"user,omitempty" jsonschema:"User to run as: user (the default) or root"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"Kill the run after this many seconds; default 50"`
}

type runCodeOut struct {
	Language string `json:"language" jsonschema:"The language run"`
	ExitCode int    `json:"exit_code" jsonschema:"The interpreter's exit code"`
	Stdout   string `json:"stdout" jsonschema:"Standard output, cut to the output limit"`
	Stderr   string `json:"stderr" jsonschema:"Standard error, cut to the output limit"`
	Error    string `json:"error,omitempty" jsonschema:"The error the snippet ended with, such as its exception; empty on success"`
}

func (t *tools) registerCode(s *mcpsdk.Server) {
	addTool(s, t, &mcpsdk.Tool{
		Name:  "run_code",
		Title: "Run a code snippet",
		Description: "Run a Python or JavaScript snippet in a sandbox and return its stdout, stderr and the error it ended with, if any. " +
			"State does not carry over between runs: write files to keep it.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: yes, OpenWorldHint: yes},
	}, map[string][]any{"language": {"python", "javascript", "node"}}, t.runCode)
}

func (t *tools) runCode(ctx context.Context, in runCodeIn) (*mcpsdk.CallToolResult, runCodeOut, error) {
	var out runCodeOut
	lang := strings.ToLower(strings.TrimSpace(in.Language))
	interp, ok := interpreters[lang]
	if !ok {
		return nil, out, errArgument("language %q: use python or javascript", in.Language)
	}
	if strings.TrimSpace(in.Code) == "" {
		return nil, out, errArgument("code is empty")
	}
	if in.TimeoutSeconds < 0 {
		return nil, out, errArgument("timeout_seconds must not be negative")
	}
	sb, err := t.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	file := "/tmp/tupper-run-" + hex.EncodeToString(rnd[:]) + interp.ext
	if _, err := sb.Files.Write(ctx, file, []byte(in.Code), fileOptions(in.User)...); err != nil {
		return nil, out, explain(ctx, "write the snippet to "+file, sb.ID(), err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := sb.Files.Remove(rctx, file, fileOptions(in.User)...); err != nil && !sdk.IsNotFound(err) {
			t.log.Warn("remove snippet file", "sandbox", sb.ID(), "file", file, "err", err)
		}
	}()
	timeout := time.Duration(in.TimeoutSeconds) * time.Second
	if timeout == 0 {
		timeout = DefaultCommandTimeout
	}
	res, err := t.runForeground(ctx, sb, interp.program+" "+file, commandOptions(in.Cwd, in.User, in.Env, timeout), timeout)
	if err != nil {
		return nil, out, err
	}
	if res.ExitCode == 127 && strings.Contains(res.Stderr, interp.program) {
		return nil, out, fmt.Errorf("%s is not installed in sandbox %q: create a sandbox from a template that has it (base has python3 and node)", interp.program, sb.ID())
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
