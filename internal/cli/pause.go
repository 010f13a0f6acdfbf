package cli

import (
	"context"

	"github.com/spf13/cobra"
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

// runPause pauses every sandbox named, going on past failures, and
// fails when any pause did.
func runPause(ctx context.Context, g *globals, o *pauseOptions) error {
	return runEach(ctx, g, &o.api, eachSpec{
		do:      func(ctx context.Context, r *remote, id string) error { return r.Pause(ctx, id) },
		explain: sandboxError,
	}, o.ids)
}
