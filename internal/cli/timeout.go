package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

type timeoutOptions struct {
	api     apiOptions
	id      string
	timeout time.Duration
}

func newTimeoutCmd(g *globals) *cobra.Command {
	o := &timeoutOptions{}
	cmd := &cobra.Command{
		Use:   "timeout ID SECONDS",
		Short: "Make a sandbox of `tupper serve` live SECONDS from now",
		Long: `Make a running sandbox live SECONDS from now, longer or shorter than before;
when the time is up it is killed. SECONDS may also be a duration like 30m.`,
		Example: `  tupper timeout "$id" 3600
  tupper timeout "$id" 2h`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := parseSeconds(args[1])
			if err != nil {
				return err
			}
			o.id, o.timeout = args[0], d
			return runTimeout(cmd.Context(), g, o)
		},
	}
	addAPIFlags(cmd, &o.api)
	return cmd
}

// parseSeconds reads a whole number of seconds or a Go duration.
func parseSeconds(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 || n > int64(24*365*time.Hour/time.Second) {
			return 0, fmt.Errorf("timeout %q: want a positive number of seconds", s)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("timeout %q: want a positive number of seconds or a duration like 30m", s)
	}
	return d, nil
}

func runTimeout(ctx context.Context, g *globals, o *timeoutOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	return r.control(r.SetTimeout(ctx, o.id, o.timeout), o.id)
}
