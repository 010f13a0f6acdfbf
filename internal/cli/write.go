package cli

import (
	"context"

	"github.com/spf13/cobra"
)

type writeOptions struct {
	api      apiOptions
	id, path string
	user     string
}

func newWriteCmd(g *globals) *cobra.Command {
	o := &writeOptions{}
	cmd := &cobra.Command{
		Use:   "write ID PATH",
		Short: "Write standard input to a file of a sandbox of `tupper serve`",
		Long: `Write standard input to a file of a running sandbox, creating the file and
its missing parent directories and replacing what was there. The input is
streamed, never held whole in memory.`,
		Example: `  echo 'print(6*7)' | tupper write "$id" /home/user/main.py`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.id, o.path = args[0], args[1]
			return runWrite(cmd.Context(), g, o)
		},
	}
	cmd.Flags().StringVarP(&o.user, "user", "u", "", "user to write as (default user)")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runWrite(ctx context.Context, g *globals, o *writeOptions) error {
	r, sb, err := o.api.sandbox(ctx, o.id)
	if err != nil {
		return err
	}
	opts := asUser(o.user)
	_, err = sb.Files.WriteStream(ctx, o.path, g.stdin, opts...)
	return r.data(ctx, err, o.id)
}
