package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
)

type lsOptions struct {
	api      apiOptions
	metadata []string
	states   []string
	json     bool
}

func newLsCmd(g *globals) *cobra.Command {
	o := &lsOptions{}
	cmd := &cobra.Command{
		Use:     "ls [--metadata K=V]... [--state running|paused]",
		Aliases: []string{"list"},
		Short:   "List the sandboxes of `tupper serve`",
		Example: `  tupper ls
  tupper ls --metadata owner=me --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLs(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.metadata, "metadata", "m", nil, "keep the sandboxes with this metadata, KEY=VALUE (repeatable: all must match)")
	f.StringSliceVar(&o.states, "state", nil, "keep the sandboxes in this state: running or paused (repeatable)")
	f.BoolVar(&o.json, "json", false, "print a JSON array")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runLs(ctx context.Context, g *globals, o *lsOptions) error {
	md, err := parsePairs("--metadata", o.metadata)
	if err != nil {
		return err
	}
	for _, s := range o.states {
		if s != "running" && s != "paused" {
			return fmt.Errorf("--state %q: want running or paused", s)
		}
	}
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	var all []sdk.SandboxInfo
	pager := r.NewPaginator(sdk.ListOptions{Metadata: md, States: o.states, Limit: 100})
	for pager.HasNext() {
		page, err := pager.Next(ctx)
		if err != nil {
			return r.control(err, "")
		}
		all = append(all, page...)
	}
	if o.json {
		out := make([]sandboxJSON, 0, len(all))
		for i := range all {
			out = append(out, toJSON(&all[i]))
		}
		return printJSON(g.stdout, out)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX ID\tTEMPLATE\tBACKEND\tSTATE\tSTARTED\tENDS IN\tMETADATA")
	now := time.Now()
	for _, sb := range all {
		ends := until(now, sb.EndAt)
		if sb.State == "paused" {
			ends = "-" // a paused sandbox waits for resume or kill
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.SandboxID, sb.TemplateID, orDash(sb.Backend), sb.State,
			sb.StartedAt.Local().Format(time.DateTime), ends, formatPairs(sb.Metadata))
	}
	return tw.Flush()
}

// orDash is s, or "-" when a server did not say (E2B's API knows no
// backends).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// until says how long from now t is, to the second.
func until(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now).Round(time.Second)
	if d <= 0 {
		return "now"
	}
	s := d.String() // "1h0m0s": drop the zero units at the end
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
