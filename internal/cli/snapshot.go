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

func newSnapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save sandboxes of `tupper serve` as snapshots to start new ones from (create, ls, rm)",
		Long: `A snapshot is a sandbox saved while it runs on, with its processes, memory and
files: ` + "`tupper create --template SNAPSHOT`" + ` (its id or name) starts a new sandbox
from it, as it was, with an id and access token of its own.`,
		Example: `  tupper snapshot create "$id" --name warm
  tupper create --template warm
  tupper snapshot rm warm`,
	}
	cmd.AddCommand(newSnapshotCreateCmd(g), newSnapshotLsCmd(g), newSnapshotRmCmd(g))
	return cmd
}

// snapshotJSON is how the CLI prints a snapshot with --json: the API's
// field names.
type snapshotJSON struct {
	SnapshotID string    `json:"snapshotID"`
	Names      []string  `json:"names"`
	SandboxID  string    `json:"sandboxID"`
	CreatedAt  time.Time `json:"createdAt"`
	SizeBytes  int64     `json:"sizeBytes"`
}

func toSnapshotJSON(sn *sdk.SnapshotInfo) snapshotJSON {
	names := sn.Names
	if names == nil {
		names = []string{}
	}
	return snapshotJSON{SnapshotID: sn.SnapshotID, Names: names, SandboxID: sn.SandboxID, CreatedAt: sn.CreatedAt, SizeBytes: sn.SizeBytes}
}

type snapshotCreateOptions struct {
	api  apiOptions
	id   string
	name string
	json bool
}

func newSnapshotCreateCmd(g *globals) *cobra.Command {
	o := &snapshotCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create ID [--name NAME]",
		Short: "Snapshot a sandbox, which runs on, and print the snapshot's id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.id = args[0]
			return runSnapshotCreate(cmd.Context(), g, o)
		},
	}
	cmd.Flags().StringVar(&o.name, "name", "", "a name to create sandboxes from it by, besides its id (unique)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the snapshot's description as JSON instead of its id")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runSnapshotCreate(ctx context.Context, g *globals, o *snapshotCreateOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	sn, err := r.CreateSnapshot(ctx, o.id, o.name)
	if err != nil {
		return r.control(err, o.id)
	}
	if o.json {
		return printJSON(g.stdout, toSnapshotJSON(sn))
	}
	_, err = fmt.Fprintln(g.stdout, sn.SnapshotID)
	return err
}

type snapshotLsOptions struct {
	api     apiOptions
	sandbox string
	name    string
	json    bool
}

func newSnapshotLsCmd(g *globals) *cobra.Command {
	o := &snapshotLsOptions{}
	cmd := &cobra.Command{
		Use:     "ls [--sandbox ID] [--name NAME]",
		Aliases: []string{"list"},
		Short:   "List snapshots, oldest first",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSnapshotLs(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.sandbox, "sandbox", "", "keep the snapshots of this sandbox")
	f.StringVar(&o.name, "name", "", "keep the snapshot of this name")
	f.BoolVar(&o.json, "json", false, "print a JSON array")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runSnapshotLs(ctx context.Context, g *globals, o *snapshotLsOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	all, err := allPages(func(next string) ([]sdk.SnapshotInfo, string, error) {
		return r.ListSnapshots(ctx, sdk.SnapshotListOptions{SandboxID: o.sandbox, Name: o.name, Limit: 100, NextToken: next})
	})
	if err != nil {
		return r.control(err, "")
	}
	if o.json {
		out := make([]snapshotJSON, 0, len(all))
		for i := range all {
			out = append(out, toSnapshotJSON(&all[i]))
		}
		return printJSON(g.stdout, out)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SNAPSHOT ID\tNAMES\tSANDBOX\tCREATED\tSIZE")
	for _, sn := range all {
		created := "-"
		if !sn.CreatedAt.IsZero() {
			created = sn.CreatedAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sn.SnapshotID, orDash(strings.Join(sn.Names, ",")), orDash(sn.SandboxID), created, humanSize(sn.SizeBytes))
	}
	return tw.Flush()
}

func newSnapshotRmCmd(g *globals) *cobra.Command { return newEachCmd(g, snapshotRmSpec()) }

// snapshotRmSpec is `tupper snapshot rm`.
func snapshotRmSpec() eachSpec {
	return eachSpec{
		use:     "rm ID|NAME...",
		short:   "Remove snapshots; sandboxes started from them run on",
		do:      func(ctx context.Context, r *remote, ref string) error { return r.DeleteSnapshot(ctx, ref) },
		explain: notFoundHint("snapshot"),
	}
}
