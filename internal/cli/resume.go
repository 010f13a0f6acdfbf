package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

type resumeOptions struct {
	api     apiOptions
	id      string
	timeout time.Duration
}

func newResumeCmd(g *globals) *cobra.Command {
	o := &resumeOptions{}
	cmd := &cobra.Command{
		Use:   "resume ID [--timeout DURATION]",
		Short: "Resume a paused sandbox of `tupper serve`",
		Long: `Resume a paused sandbox: it runs again with its processes, memory and files as
they were when it was paused. It then lives --timeout from now, or the timeout
it was created with. A sandbox that runs already is left running; --timeout
then lengthens its life, never shortens it.`,
		Example: `  tupper resume "$id"
  tupper resume "$id" --timeout 1h`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.id = args[0]
			return runResume(cmd.Context(), g, o)
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "time to live from now, for example 30m (default: the sandbox's own)")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runResume(ctx context.Context, g *globals, o *resumeOptions) error {
	if o.timeout < 0 {
		return fmt.Errorf("--timeout %v: must not be negative", o.timeout)
	}
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	_, err = r.Resume(ctx, o.id, o.timeout)
	return r.control(err, o.id)
}
