package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
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

// runKill kills every sandbox named, going on past failures, and fails
// when any kill did.
func runKill(ctx context.Context, g *globals, o *killOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	failed := 0
	for _, id := range o.ids {
		if err := r.Kill(ctx, id); err != nil {
			// Errors that every other kill would repeat end the run.
			if unreachable(err) || sdk.IsUnauthenticated(err) || ctx.Err() != nil {
				return r.control(err, id)
			}
			fmt.Fprintln(g.stderr, "tupper:", r.control(err, id))
			failed++
		}
	}
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}
