package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
)

type readOptions struct {
	api      apiOptions
	id, path string
	user     string
}

func newReadCmd(g *globals) *cobra.Command {
	o := &readOptions{}
	cmd := &cobra.Command{
		Use:     "read ID PATH",
		Short:   "Write a file of a sandbox of `tupper serve` to standard output",
		Example: `  tupper read "$id" /home/user/out.json | jq .`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.id, o.path = args[0], args[1]
			return runRead(cmd.Context(), g, o)
		},
	}
	cmd.Flags().StringVarP(&o.user, "user", "u", "", "user to read as (default user)")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runRead(ctx context.Context, g *globals, o *readOptions) error {
	r, sb, err := o.api.sandbox(ctx, o.id)
	if err != nil {
		return err
	}
	opts := asUser(o.user)
	rc, err := sb.Files.ReadStream(ctx, o.path, opts...)
	if sdk.IsNotFound(err) {
		return fmt.Errorf("%s:%s: no such file in the sandbox", o.id, o.path)
	}
	if err != nil {
		return r.data(ctx, err, o.id)
	}
	defer rc.Close()
	if _, err := io.Copy(g.stdout, rc); err != nil {
		return r.data(ctx, fmt.Errorf("read %s:%s: %w", o.id, o.path, err), o.id)
	}
	return nil
}
