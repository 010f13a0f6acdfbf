package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
)

// maxCodeInput bounds the code read from standard input: the interpreter
// takes 16 MiB per cell.
const maxCodeInput = 16 << 20

type runCodeOptions struct {
	api        apiOptions
	id         string
	code       string // the argument; "" or "-" reads standard input
	language   string
	context    string
	env        []string
	json       bool
	timeout    time.Duration
	saveImages string
}

func newRunCodeCmd(g *globals) *cobra.Command {
	o := &runCodeOptions{}
	cmd := &cobra.Command{
		Use:   "run-code ID [CODE|-] [--language LANG | --context CTX] [--env K=V]... [--json] [--save-images DIR]",
		Short: "Run code in the code interpreter of a sandbox of `tupper serve`, as a notebook cell",
		Long: `Run code in the code interpreter of a sandbox made from the code-interpreter
template. State carries over between runs in a context, as in a notebook:
variables set by one run are there in the next. The code comes from the
argument, or from standard input when it is - or missing.

Output is streamed as it comes; the value of the code's last expression is
printed at the end. Images (plots) are noted on standard error, and written
as result-N.png (or .jpg, .svg, .pdf) with --save-images. When the code
raises, its traceback goes to standard error and tupper exits with 1.
--json prints the whole execution as JSON instead.`,
		Example: `  tupper run-code "$id" 'x = 41'
  tupper run-code "$id" 'x + 1'                       # prints 42
  tupper run-code "$id" --language bash 'ls /home/user'
  tupper run-code "$id" --save-images plots < analysis.py`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.id = args[0]
			if len(args) == 2 {
				o.code = args[1]
			}
			return runRunCode(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.language, "language", "l", "", "python (default), javascript (js), typescript (ts) or bash")
	f.StringVar(&o.context, "context", "", "run in this code context (its id) instead of the language's default one")
	f.StringArrayVarP(&o.env, "env", "e", nil, "environment variable KEY=VALUE for this run only (repeatable)")
	f.BoolVar(&o.json, "json", false, "print the execution (results, logs, error) as JSON")
	f.DurationVar(&o.timeout, "timeout", 0, "interrupt the code after this long (default: never); its context keeps its state")
	f.StringVar(&o.saveImages, "save-images", "", "write image results to this directory as result-N.png")
	addAPIFlags(cmd, &o.api)
	return cmd
}

// check validates the flags, before any request.
func (o *runCodeOptions) check() error {
	if o.language != "" && o.context != "" {
		return errors.New("--language and --context: give one; a context has its language")
	}
	if o.timeout < 0 {
		return fmt.Errorf("--timeout %v: must not be negative", o.timeout)
	}
	_, err := parsePairs("--env", o.env)
	return err
}

func runRunCode(ctx context.Context, g *globals, o *runCodeOptions) error {
	// A closed terminal ends the run too: the interpreter interrupts a
	// cell whose client went away.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	if err := o.check(); err != nil {
		return err
	}
	r, sb, err := o.api.sandbox(ctx, o.id)
	if err != nil {
		return err
	}
	return r.data(ctx, runCodeIn(ctx, g, o, sb), o.id)
}

// runCodeIn runs o's code in sandbox sb and prints what it did.
func runCodeIn(ctx context.Context, g *globals, o *runCodeOptions, sb *sdk.Sandbox) error {
	if err := o.check(); err != nil {
		return err
	}
	code := o.code
	if code == "" || code == "-" {
		b, err := io.ReadAll(io.LimitReader(g.stdin, maxCodeInput+1))
		if err != nil {
			return &readError{err}
		}
		if len(b) > maxCodeInput {
			return fmt.Errorf("the code on standard input is over %d bytes", maxCodeInput)
		}
		code = string(b)
	}
	env, _ := parsePairs("--env", o.env)

	opts := []sdk.RunCodeOption{sdk.WithCodeTimeout(o.timeout)}
	if o.language != "" {
		opts = append(opts, sdk.WithLanguage(o.language))
	}
	if o.context != "" {
		opts = append(opts, sdk.WithCodeContext(o.context))
	}
	if len(env) > 0 {
		opts = append(opts, sdk.WithCodeEnv(env))
	}
	var saveErr error
	n := 0
	opts = append(opts, sdk.WithOnResult(func(res sdk.Result) {
		n++
		if err := o.showResult(g, n, res); err != nil && saveErr == nil {
			saveErr = err
		}
	}))
	if !o.json {
		// With --json, standard output carries the JSON only.
		opts = append(opts,
			sdk.WithOnCodeStdout(func(s string) { io.WriteString(g.stdout, s) }),
			sdk.WithOnCodeStderr(func(s string) { io.WriteString(g.stderr, s) }),
		)
	}

	exec, err := sb.RunCode(ctx, code, opts...)
	timedOut := err != nil && sdk.IsDeadlineExceeded(err) && exec != nil && ctx.Err() == nil
	switch {
	case sdk.IsNotFound(err) && o.context != "":
		return fmt.Errorf("code context %s not found in sandbox %s: it was removed, or never made there", o.context, o.id)
	case err != nil && !timedOut:
		return err
	}
	if o.json {
		if err := printJSON(g.stdout, exec); err != nil {
			return err
		}
	}
	if saveErr != nil {
		return saveErr
	}
	if timedOut {
		fmt.Fprintf(g.stderr, "tupper: the code ran past --timeout %v and was interrupted (its context keeps its state)\n", o.timeout)
		return &exitError{code: exitTimedOut}
	}
	if e := exec.Error; e != nil {
		if !o.json {
			tb := strings.TrimRight(e.Traceback, "\n")
			if tb != "" {
				fmt.Fprintln(g.stderr, tb)
			}
			if !strings.Contains(tb, e.Error()) {
				fmt.Fprintln(g.stderr, e.Error())
			}
		}
		return &exitError{code: 1}
	}
	return nil
}

// imageFormats are the formats --save-images writes, with their file
// extensions.
var imageFormats = []struct {
	ext  string
	data func(sdk.Result) []byte
}{
	{".png", func(r sdk.Result) []byte { return r.PNG }},
	{".jpg", func(r sdk.Result) []byte { return r.JPEG }},
	{".svg", func(r sdk.Result) []byte { return []byte(r.SVG) }},
	{".pdf", func(r sdk.Result) []byte { return r.PDF }},
}

// showResult prints result n as it arrives: its text on standard output
// (but for images, whose text only names them), and a note on standard
// error for each image, which --save-images writes to a file.
func (o *runCodeOptions) showResult(g *globals, n int, r sdk.Result) error {
	images := 0
	for _, f := range imageFormats {
		data := f.data(r)
		if len(data) == 0 {
			continue
		}
		images++
		if o.saveImages == "" {
			if !o.json {
				fmt.Fprintf(g.stderr, "tupper: result %d is a %s image of %d bytes (--save-images DIR writes it)\n", n, strings.TrimPrefix(f.ext, "."), len(data))
			}
			continue
		}
		if err := os.MkdirAll(o.saveImages, 0o755); err != nil {
			return fmt.Errorf("--save-images: %w", err)
		}
		path := filepath.Join(o.saveImages, fmt.Sprintf("result-%d%s", n, f.ext))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return fmt.Errorf("--save-images: %w", err)
		}
		fmt.Fprintf(g.stderr, "tupper: wrote %s (%d bytes)\n", path, len(data))
	}
	if o.json || images > 0 {
		return nil
	}
	if r.Text != "" {
		fmt.Fprintln(g.stdout, strings.TrimSuffix(r.Text, "\n"))
	} else {
		fmt.Fprintf(g.stderr, "tupper: result %d has no text (formats: %s); --json shows it\n", n, strings.Join(r.Formats(), ", "))
	}
	return nil
}
