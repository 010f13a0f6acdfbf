package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

type forkOptions struct {
	api     apiOptions
	id      string
	count   int
	timeout time.Duration
}

func newForkCmd(g *globals) *cobra.Command {
	o := &forkOptions{}
	cmd := &cobra.Command{
		Use:   "fork ID [-n COUNT] [--timeout DURATION]",
		Short: "Start copies of a sandbox of `tupper serve` as it is now, and print their ids",
		Long: `Start COUNT new sandboxes from a sandbox as it is now, which runs on: each has
its processes, memory and files, and an id, access token and network of its
own. Their ids are printed one a line; a copy that could not start is
reported on stderr, and the exit status is then 1.`,
		Example: `  tupper fork "$id" -n 3
  for f in $(tupper fork "$id" -n 2); do tupper exec "$f" -- ./try.sh; done`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.id = args[0]
			return runFork(cmd.Context(), g, o)
		},
	}
	cmd.Flags().IntVarP(&o.count, "count", "n", 1, "how many copies to start")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "time to live of each copy, for example 30m (default: the source's)")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runFork(ctx context.Context, g *globals, o *forkOptions) error {
	if o.count < 1 {
		return fmt.Errorf("-n %d: want at least 1", o.count)
	}
	if o.timeout < 0 {
		return fmt.Errorf("--timeout %v: must not be negative", o.timeout)
	}
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	results, err := r.Fork(ctx, o.id, o.count, o.timeout)
	if err != nil {
		return r.control(err, o.id)
	}
	failed := 0
	for i, res := range results {
		if res.Err != nil {
			fmt.Fprintf(g.stderr, "tupper: copy %d of %d: %v\n", i+1, len(results), r.control(res.Err, ""))
			failed++
			continue
		}
		fmt.Fprintln(g.stdout, res.Sandbox.ID())
	}
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}
