package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
)

type pauseOptions struct {
	api apiOptions
	ids []string
}

func newPauseCmd(g *globals) *cobra.Command {
	o := &pauseOptions{}
	cmd := &cobra.Command{
		Use:   "pause ID...",
		Short: "Pause sandboxes of `tupper serve`: save them to disk and free their memory",
		Long: `Pause sandboxes: each is saved to disk with its processes, memory and files,
and frees the memory and CPU it held. A paused sandbox does not time out; it
stays, listed by ` + "`tupper ls`" + `, until ` + "`tupper resume`" + ` (or any command that connects
to it, such as ` + "`tupper exec`" + `) brings it back as it was, or ` + "`tupper kill`" + ` removes it.`,
		Example: `  tupper pause "$id"
  tupper resume "$id" --timeout 30m`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ids = args
			return runPause(cmd.Context(), g, o)
		},
	}
	addAPIFlags(cmd, &o.api)
	return cmd
}

// runPause pauses every sandbox named, going on past failures, and fails
// when any pause did.
func runPause(ctx context.Context, g *globals, o *pauseOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	failed := 0
	for _, id := range o.ids {
		if err := r.Pause(ctx, id); err != nil {
			// Errors that every other pause would repeat end the run.
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
