package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
)

// rmSpec describes a command that deletes named things of the daemon
// (snapshots, templates, volumes, secrets): `tupper <thing> rm REF...`.
type rmSpec struct {
	use, short string
	// del deletes the thing ref names.
	del func(ctx context.Context, r *remote, ref string) error
	// explain says what a failure to delete ref means to a user.
	explain func(r *remote, err error, ref string) error
}

// newRmCmd returns the command of spec.
func newRmCmd(g *globals, spec rmSpec) *cobra.Command {
	var api apiOptions
	cmd := &cobra.Command{
		Use:     spec.use,
		Aliases: []string{"delete"},
		Short:   spec.short,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRm(cmd.Context(), g, &api, spec, args)
		},
	}
	addAPIFlags(cmd, &api)
	return cmd
}

// runRm deletes every thing refs name, going on past failures (each
// reported), and fails when any deletion did; a daemon that cannot be
// reached, or refuses the key, stops it at once.
func runRm(ctx context.Context, g *globals, api *apiOptions, spec rmSpec, refs []string) error {
	r, err := api.dial()
	if err != nil {
		return err
	}
	failed := 0
	for _, ref := range refs {
		err := spec.del(ctx, r, ref)
		switch {
		case err == nil:
			continue
		case unreachable(err) || sdk.IsUnauthenticated(err) || ctx.Err() != nil:
			return r.control(err, "")
		default:
			fmt.Fprintln(g.stderr, "tupper:", spec.explain(r, err, ref))
		}
		failed++
	}
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}

// notFoundHint is an explain of rmSpec for a thing that `tupper <what>
// ls` lists.
func notFoundHint(what string) func(r *remote, err error, ref string) error {
	return func(r *remote, err error, ref string) error {
		if sdk.IsNotFound(err) {
			return fmt.Errorf("%s %s not found: run `tupper %s ls` to see your team's", what, ref, what)
		}
		return r.control(err, "")
	}
}
