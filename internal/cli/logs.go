package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

type logsOptions struct {
	api    apiOptions
	id     string
	level  string
	search string
	// tail, when positive, prints the last tail entries instead of the
	// first ones.
	tail   int
	limit  int
	follow bool
	json   bool
	// poll is how often --follow asks for more; zero means a second.
	poll time.Duration
}

func newLogsCmd(g *globals) *cobra.Command {
	o := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print the log of a sandbox of `tupper serve`: its agent's messages and its start command's output",
		Long: "Print the log of a sandbox of `tupper serve`: what its agent logged, its template's start command's\n" +
			"output among it, oldest first. A line without a time of its own shows the time of the line above it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.id = args[0]
			return runLogs(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.level, "level", "", "print only entries at or above this level (debug, info, warn, error)")
	f.StringVar(&o.search, "search", "", "print only entries whose message holds this text (case-sensitive)")
	f.IntVarP(&o.tail, "tail", "n", 0, "print the last N entries instead of the first ones")
	f.IntVar(&o.limit, "limit", 0, "print at most N entries (default: the server's, 1000)")
	f.BoolVarP(&o.follow, "follow", "f", false, "keep printing new entries until the sandbox is gone")
	f.BoolVar(&o.json, "json", false, "print one JSON object per entry")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runLogs(ctx context.Context, g *globals, o *logsOptions) error {
	if o.tail < 0 || o.limit < 0 {
		return fmt.Errorf("--tail and --limit count entries: they may not be negative")
	}
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	opts := []sdk.LogOption{sdk.LogsLevel(o.level), sdk.LogsSearch(o.search), sdk.LogsLimit(o.limit)}
	if o.tail > 0 {
		opts = append(opts, sdk.LogsBackward(), sdk.LogsLimit(o.tail))
	}
	entries, err := r.Logs(ctx, o.id, opts...)
	if err != nil {
		return r.control(err, o.id)
	}
	if o.tail > 0 {
		slices.Reverse(entries)
	}
	p := logPrinter{w: g.stdout, json: o.json}
	if err := p.print(entries); err != nil {
		return err
	}
	if !o.follow {
		return nil
	}
	return followLogs(ctx, r, o, &p)
}

// followBatch is how many entries --follow asks for at once.
const followBatch = 1000

// followLogs prints the entries logged after the last one printed, every
// poll, until the sandbox is gone or ctx ends. A paused sandbox is waited
// for.
func followLogs(ctx context.Context, r *remote, o *logsOptions, p *logPrinter) error {
	poll := o.poll
	if poll == 0 {
		poll = time.Second
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
		for {
			opts := []sdk.LogOption{sdk.LogsLevel(o.level), sdk.LogsSearch(o.search), sdk.LogsLimit(followBatch)}
			if !p.last.IsZero() {
				opts = append(opts, sdk.LogsFrom(p.last))
			}
			entries, err := r.Logs(ctx, o.id, opts...)
			switch {
			case ctx.Err() != nil:
				return nil
			case sdk.IsNotFound(err):
				return nil // killed: its log is gone with it
			case errors.Is(err, errdefs.ErrFailedPrecondition):
				entries = nil // paused: its log is back when it resumes
			case err != nil:
				return r.control(err, o.id)
			}
			fresh := p.unseen(entries)
			if err := p.print(fresh); err != nil {
				return err
			}
			if len(entries) < followBatch {
				break
			}
		}
	}
}

// logPrinter prints entries, and remembers where it stopped so that a
// follow prints each entry once.
type logPrinter struct {
	w    io.Writer
	json bool
	// last is the time of the last entry printed, to the millisecond as
	// the API's cursors go; atLast counts the entries printed at or
	// after it, which the next read from last returns again first.
	last   time.Time
	atLast int
}

// unseen drops from entries, read from p.last on, those printed already.
func (p *logPrinter) unseen(entries []sdk.LogEntry) []sdk.LogEntry {
	return entries[min(p.atLast, len(entries)):]
}

func (p *logPrinter) print(entries []sdk.LogEntry) error {
	for _, e := range entries {
		if err := p.line(e); err != nil {
			return err
		}
		if t := e.Timestamp.Truncate(time.Millisecond); t.Equal(p.last) {
			p.atLast++
		} else {
			p.last, p.atLast = t, 1
		}
	}
	return nil
}

func (p *logPrinter) line(e sdk.LogEntry) error {
	if p.json {
		fields := e.Fields
		if fields == nil {
			fields = map[string]string{}
		}
		return json.NewEncoder(p.w).Encode(map[string]any{"timestamp": e.Timestamp, "level": e.Level, "message": e.Message, "fields": fields})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-5s %s", e.Timestamp.Local().Format("2006-01-02T15:04:05.000Z07:00"), strings.ToUpper(e.Level), e.Message)
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := e.Fields[k]
		if v == "" || strings.ContainsAny(v, " \"=\t\n") {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	b.WriteByte('\n')
	_, err := io.WriteString(p.w, b.String())
	return err
}
