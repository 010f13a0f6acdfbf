package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

type infoOptions struct {
	api  apiOptions
	id   string
	json bool
}

func newInfoCmd(g *globals) *cobra.Command {
	o := &infoOptions{}
	cmd := &cobra.Command{
		Use:   "info ID",
		Short: "Describe a sandbox of `tupper serve`",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.id = args[0]
			return runInfo(cmd.Context(), g, o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runInfo(ctx context.Context, g *globals, o *infoOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	info, err := r.GetInfo(ctx, o.id)
	if err != nil {
		return r.control(err, o.id)
	}
	if o.json {
		return printJSON(g.stdout, toJSON(info))
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	ends := fmt.Sprintf("%s (in %s)", info.EndAt.Local().Format(time.RFC3339), until(time.Now(), info.EndAt))
	if info.State == "paused" {
		ends = "- (paused: it waits to be resumed or killed)"
	}
	rows := [][2]string{
		{"Sandbox ID", info.SandboxID},
		{"Template", info.TemplateID},
		{"Backend", orDash(info.Backend)},
		{"State", info.State},
		{"Started", info.StartedAt.Local().Format(time.RFC3339)},
		{"Ends", ends},
		{"CPUs", fmt.Sprint(info.CPUCount)},
		{"Memory", fmt.Sprintf("%d MB", info.MemoryMB)},
		{"Disk", fmt.Sprintf("%d MB", info.DiskSizeMB)},
		{"Metadata", formatPairs(info.Metadata)},
		{"Envd version", info.EnvdVersion},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}
