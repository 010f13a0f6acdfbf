package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// CodeInterpreterPort is the port of the code interpreter in sandboxes of
// the code-interpreter template, where E2B's SDKs look for it.
const CodeInterpreterPort = 49999

// DefaultCodeTimeout is how long a cell may run when no WithCodeTimeout
// option is given, as in E2B's SDKs.
const DefaultCodeTimeout = 60 * time.Second

// The languages of the code interpreter. It also takes "js" and "ts".
const (
	LanguagePython     = "python"
	LanguageJavaScript = "javascript"
	LanguageTypeScript = "typescript"
	LanguageBash       = "bash"
)

// RunCodeOption is a per-call option of Sandbox.RunCode.
type RunCodeOption interface {
	applyCode(*codeOptions)
}

type codeOptions struct {
	language  string
	contextID string
	env       map[string]string
	timeout   time.Duration
	onStdout  func(string)
	onStderr  func(string)
	onResult  func(Result)
	onError   func(ExecutionError)
}

type codeOption func(*codeOptions)

func (f codeOption) applyCode(o *codeOptions) { f(o) }

func newCodeOptions(opts []RunCodeOption) *codeOptions {
	o := &codeOptions{timeout: DefaultCodeTimeout}
	for _, opt := range opts {
		if opt != nil {
			opt.applyCode(o)
		}
	}
	return o
}

// WithLanguage runs the code in the default context of a language
// (LanguagePython, the default, LanguageJavaScript, LanguageTypeScript,
// LanguageBash). It cannot be combined with WithCodeContext.
func WithLanguage(lang string) RunCodeOption {
	return codeOption(func(o *codeOptions) { o.language = lang })
}

// WithCodeContext runs the code in the context with this id, made by
// CreateCodeContext, whose language and state it uses.
func WithCodeContext(id string) RunCodeOption {
	return codeOption(func(o *codeOptions) { o.contextID = id })
}

// WithCodeEnv sets environment variables for this cell only; the map is
// copied.
func WithCodeEnv(env map[string]string) RunCodeOption {
	env = maps.Clone(env)
	return codeOption(func(o *codeOptions) {
		if o.env == nil {
			o.env = map[string]string{}
		}
		maps.Copy(o.env, env)
	})
}

// WithCodeTimeout bounds how long the cell may run: when the time is up
// the cell is interrupted, its context keeping its state, and RunCode
// fails with an error of class errdefs.ErrDeadlineExceeded. Zero means no
// limit. The default is DefaultCodeTimeout.
func WithCodeTimeout(d time.Duration) RunCodeOption {
	return codeOption(func(o *codeOptions) { o.timeout = max(d, 0) })
}

// WithOnCodeStdout calls fn with each chunk of the cell's standard output
// as it arrives. The callbacks of one RunCode run one at a time on its
// goroutine, in the order the messages came; a slow callback slows the
// stream.
func WithOnCodeStdout(fn func(string)) RunCodeOption {
	return codeOption(func(o *codeOptions) { o.onStdout = fn })
}

// WithOnCodeStderr calls fn with each chunk of the cell's standard error
// as it arrives, like WithOnCodeStdout.
func WithOnCodeStderr(fn func(string)) RunCodeOption {
	return codeOption(func(o *codeOptions) { o.onStderr = fn })
}

// WithOnResult calls fn with each rich result as it arrives (a plot shown
// half way through a cell comes before the cell ends).
func WithOnResult(fn func(Result)) RunCodeOption {
	return codeOption(func(o *codeOptions) { o.onResult = fn })
}

// WithOnError calls fn with the error the cell ended with, when it does.
func WithOnError(fn func(ExecutionError)) RunCodeOption {
	return codeOption(func(o *codeOptions) { o.onError = fn })
}

// executeBody is the body of the interpreter's POST /execute.
type executeBody struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id,omitempty"`
	Language  string            `json:"language,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"`
}

// errCodeTimeout ends the request of a cell that ran past its timeout.
var errCodeTimeout = errors.New("the cell ran past its timeout")

// RunCode runs code in the sandbox's code interpreter, in the default
// context of its language (Python unless WithLanguage says otherwise) or
// in the context WithCodeContext names, and returns what it did once it
// ends. State carries over between the cells of a context, as in a
// notebook. The sandbox must come from the code-interpreter template;
// elsewhere RunCode fails with an error of class errdefs.ErrUnavailable.
//
// A cell that raises is no error of RunCode: the error is in
// Execution.Error. RunCode fails when the cell could not run: an unknown
// context (errdefs.ErrNotFound), a bad language or option
// (errdefs.ErrInvalidArgument), an interpreter that cannot be reached. When
// the cell's timeout passes or ctx ends first, the cell is interrupted and
// RunCode returns what arrived until then together with the error.
func (s *Sandbox) RunCode(ctx context.Context, code string, opts ...RunCodeOption) (*Execution, error) {
	o := newCodeOptions(opts)
	if o.contextID != "" && o.language != "" {
		return nil, fmt.Errorf("run code: %w: give a context or a language, not both (a context has its language)", errdefs.ErrInvalidArgument)
	}
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if o.timeout > 0 {
		rctx, cancel = context.WithTimeoutCause(ctx, o.timeout, errCodeTimeout)
	}
	defer cancel()
	exec := &Execution{Results: []Result{}, Logs: Logs{Stdout: []string{}, Stderr: []string{}}}
	err := s.execute(rctx, executeBody{Code: code, ContextID: o.contextID, Language: o.language, EnvVars: o.env}, exec, o)
	switch {
	case err == nil:
		return exec, nil
	case ctx.Err() != nil:
		return exec, ctx.Err()
	case errors.Is(context.Cause(rctx), errCodeTimeout):
		return exec, fmt.Errorf("run code in sandbox %q: the cell ran past its timeout of %v and was interrupted: %w", s.ID(), o.timeout, errdefs.ErrDeadlineExceeded)
	}
	return nil, codeError("run code", s.ID(), err)
}

// execute sends one cell and reads its answer into exec.
func (s *Sandbox) execute(ctx context.Context, body executeBody, exec *Execution, o *codeOptions) error {
	req, err := s.conn.portRequest(ctx, CodeInterpreterPort, http.MethodPost, "/execute", body)
	if err != nil {
		return err
	}
	resp, err := s.conn.http.Do(req)
	if err != nil {
		return fromTransport(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fromResponse(resp)
	}
	return readExecution(resp.Body, exec, o)
}

// readExecution reads the interpreter's answer to /execute, a JSON object
// per line, into exec until its end_of_execution, calling o's callbacks
// on the way.
func readExecution(r io.Reader, exec *Execution, o *codeOptions) error {
	dec := json.NewDecoder(r)
	for {
		var line map[string]json.RawMessage
		if err := dec.Decode(&line); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("the code interpreter's answer ended before the cell did: %w", errdefs.ErrUnavailable)
			}
			var syntax *json.SyntaxError
			if errors.As(err, &syntax) {
				return fmt.Errorf("the code interpreter's answer is not JSON lines: %v: %w", err, errdefs.ErrUnavailable)
			}
			return fromTransport(err)
		}
		var typ string
		_ = json.Unmarshal(line["type"], &typ)
		switch typ {
		case "stdout", "stderr":
			var text string
			_ = json.Unmarshal(line["text"], &text)
			if typ == "stdout" {
				exec.Logs.Stdout = append(exec.Logs.Stdout, text)
				if o.onStdout != nil {
					o.onStdout(text)
				}
			} else {
				exec.Logs.Stderr = append(exec.Logs.Stderr, text)
				if o.onStderr != nil {
					o.onStderr(text)
				}
			}
		case "result":
			res := parseResult(line)
			exec.Results = append(exec.Results, res)
			if o.onResult != nil {
				o.onResult(res)
			}
		case "error":
			var e ExecutionError
			for k, dst := range map[string]*string{"name": &e.Name, "value": &e.Value, "traceback": &e.Traceback} {
				_ = json.Unmarshal(line[k], dst)
			}
			exec.Error = &e
			if o.onError != nil {
				o.onError(e)
			}
		case "number_of_executions":
			_ = json.Unmarshal(line["execution_count"], &exec.ExecutionCount)
		case "end_of_execution":
			return nil
		}
		// Other types are newer than this SDK: skipped.
	}
}

// codeError words an error of a call to sandbox's code interpreter; one
// that could not reach it says what may be missing.
func codeError(op, sandbox string, err error) error {
	if IsUnavailable(err) {
		return fmt.Errorf("%s in sandbox %q: %w (no code interpreter answered: is the sandbox gone, or not made from the code-interpreter template?)", op, sandbox, err)
	}
	return fmt.Errorf("%s in sandbox %q: %w", op, sandbox, err)
}
