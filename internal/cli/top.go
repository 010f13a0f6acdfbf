package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/internal/progress"
	"github.com/lightbearco/tupper/sdk"
)

type topOptions struct {
	api      apiOptions
	noStream bool
	stream   bool
	json     bool
	interval time.Duration
}

func newTopCmd(g *globals) *cobra.Command {
	o := &topOptions{}
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show the CPU and memory of every sandbox of `tupper serve`, live, as docker stats does",
		Long: `Show the CPU, memory and disk use of every sandbox of ` + "`tupper serve`" + `: on a terminal, a
table redrawn every --interval until interrupted; elsewhere, or with --no-stream, one
snapshot (--stream prints one after another). CPU is the share of the sandbox's own
CPUs used since its sample before; memory and disk are what it uses of what it may.
--json prints each snapshot as one JSON object a line.`,
		Example: `  tupper top
  tupper top --no-stream --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTop(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.noStream, "no-stream", false, "print one snapshot and exit")
	f.BoolVar(&o.stream, "stream", false, "keep printing snapshots when the output is not a terminal")
	f.BoolVar(&o.json, "json", false, "print each snapshot as one JSON object a line")
	f.DurationVar(&o.interval, "interval", 2*time.Second, "time between two snapshots")
	addAPIFlags(cmd, &o.api)
	return cmd
}

// topSnapshot is what `tupper top` shows at one time; --json prints it.
type topSnapshot struct {
	Timestamp time.Time `json:"timestamp"`
	Sandboxes []topRow  `json:"sandboxes"`
}

// topRow is one sandbox of a snapshot: as `tupper ls --json` shows it,
// and in Metrics its newest sample, null when it has none (yet).
type topRow struct {
	sandboxJSON
	Metrics *topMetric `json:"metrics"`
}

// topMetric is a sandbox's sample: sizes in bytes, CPU in percent of the
// sandbox's CPUs.
type topMetric struct {
	Timestamp  time.Time `json:"timestamp"`
	CPUUsedPct float64   `json:"cpuUsedPct"`
	MemUsed    uint64    `json:"memUsed"`
	MemTotal   uint64    `json:"memTotal"`
	DiskUsed   uint64    `json:"diskUsed"`
	DiskTotal  uint64    `json:"diskTotal"`
}

func runTop(ctx context.Context, g *globals, o *topOptions) error {
	if o.interval <= 0 {
		return fmt.Errorf("--interval %s: want a time above zero", o.interval)
	}
	if o.stream && o.noStream {
		return fmt.Errorf("--stream and --no-stream: choose one")
	}
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	tty := progress.IsTerminal(g.stdout)
	stream := !o.noStream && (o.stream || tty)
	for first := true; ; first = false {
		snap, err := topTake(ctx, r)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return r.control(err, "")
		}
		switch {
		case o.json:
			err = json.NewEncoder(g.stdout).Encode(snap)
		case stream && tty:
			// Redraw in place: home the cursor and clear the screen.
			fmt.Fprint(g.stdout, "\033[H\033[2J")
			err = topTable(g.stdout, snap)
		default:
			if !first {
				fmt.Fprintln(g.stdout)
			}
			err = topTable(g.stdout, snap)
		}
		if err != nil || !stream {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.interval):
		}
	}
}

// topTake lists every sandbox and asks for their newest samples at once.
func topTake(ctx context.Context, r *remote) (*topSnapshot, error) {
	var all []sdk.SandboxInfo
	pager := r.NewPaginator(sdk.ListOptions{Limit: 100})
	for pager.HasNext() {
		page, err := pager.Next(ctx)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
	}
	ids := make([]string, 0, len(all))
	for _, sb := range all {
		ids = append(ids, sb.SandboxID)
	}
	latest := map[string]sdk.Metric{}
	if len(ids) > 0 {
		var err error
		if latest, err = r.LatestMetrics(ctx, ids...); err != nil {
			return nil, err
		}
	}
	snap := &topSnapshot{Timestamp: time.Now().UTC(), Sandboxes: make([]topRow, 0, len(all))}
	for _, sb := range all {
		row := topRow{sandboxJSON: toJSON(&sb)}
		if m, ok := latest[sb.SandboxID]; ok {
			row.Metrics = &topMetric{
				Timestamp: m.Timestamp, CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemUsed, MemTotal: m.MemTotal,
				DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
			}
		}
		snap.Sandboxes = append(snap.Sandboxes, row)
	}
	slices.SortStableFunc(snap.Sandboxes, func(a, b topRow) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.SandboxID, b.SandboxID))
	})
	return snap, nil
}

// topTable writes snap as a table, as docker stats does.
func topTable(w io.Writer, snap *topSnapshot) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX ID\tTEMPLATE\tSTATE\tCPU %\tMEM USAGE / LIMIT\tMEM %\tDISK USAGE / LIMIT\tAGE\tENDS IN")
	now := snap.Timestamp
	for _, sb := range snap.Sandboxes {
		cpu, mem, memPct, disk := "-", "-", "-", "-"
		if m := sb.Metrics; m != nil {
			cpu = fmt.Sprintf("%.1f%% of %d", m.CPUUsedPct, sb.CPUCount)
			mem = humanSize(int64(m.MemUsed)) + " / " + humanSize(int64(m.MemTotal))
			if m.MemTotal > 0 {
				memPct = fmt.Sprintf("%.1f%%", 100*float64(m.MemUsed)/float64(m.MemTotal))
			}
			disk = humanSize(int64(m.DiskUsed)) + " / " + humanSize(int64(m.DiskTotal))
		}
		ends := until(now, sb.EndAt)
		if sb.State == "paused" {
			ends = "-" // a paused sandbox waits for resume or kill
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.SandboxID, cmp.Or(sb.Alias, sb.TemplateID), sb.State, cpu, mem, memPct, disk,
			until(sb.StartedAt, now), ends)
	}
	return tw.Flush()
}
