package cli

import (
	"context"

	"github.com/spf13/cobra"
)

type killOptions struct {
	api apiOptions
	ids []string
}

func newKillCmd(g *globals) *cobra.Command {
	o := &killOptions{}
	cmd := &cobra.Command{
		Use:   "kill ID...",
		Short: "Kill sandboxes of `tupper serve`",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ids = args
			return runKill(cmd.Context(), g, o)
		},
	}
	addAPIFlags(cmd, &o.api)
	return cmd
}

// runKill kills every sandbox named, going on past failures, and
// fails when any kill did.
func runKill(ctx context.Context, g *globals, o *killOptions) error {
	return runEach(ctx, g, &o.api, eachSpec{
		do:      func(ctx context.Context, r *remote, id string) error { return r.Kill(ctx, id) },
		explain: sandboxError,
	}, o.ids)
}
