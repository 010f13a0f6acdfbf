package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
)

// eachSpec describes a command that does one thing to each of the
// sandboxes, snapshots, templates, volumes or secrets it names: `tupper
// kill ID...`, `tupper pause ID...`, `tupper <thing> rm REF...`.
type eachSpec struct {
	use, short string
	// do does it to what ref names.
	do func(ctx context.Context, r *remote, ref string) error
	// explain says what a failure of ref means to a user.
	explain func(r *remote, err error, ref string) error
}

// newEachCmd returns the command of spec, a deletion (`rm`, also
// `delete`).
func newEachCmd(g *globals, spec eachSpec) *cobra.Command {
	var api apiOptions
	cmd := &cobra.Command{
		Use:     spec.use,
		Aliases: []string{"delete"},
		Short:   spec.short,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runEach(cmd.Context(), g, &api, spec, args)
		},
	}
	addAPIFlags(cmd, &api)
	return cmd
}

// runEach does spec to everything refs name, going on past failures (each
// reported), and fails when any did; a daemon that cannot be reached, or
// refuses the key, stops it at once.
func runEach(ctx context.Context, g *globals, api *apiOptions, spec eachSpec, refs []string) error {
	r, err := api.dial()
	if err != nil {
		return err
	}
	failed := 0
	for _, ref := range refs {
		err := spec.do(ctx, r, ref)
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

// sandboxError is an explain of eachSpec for sandboxes.
func sandboxError(r *remote, err error, id string) error { return r.control(err, id) }

// notFoundHint is an explain of eachSpec for a thing that `tupper <what>
// ls` lists.
func notFoundHint(what string) func(r *remote, err error, ref string) error {
	return func(r *remote, err error, ref string) error {
		if sdk.IsNotFound(err) {
			return fmt.Errorf("%s %s not found: run `tupper %s ls` to see your team's", what, ref, what)
		}
		return r.control(err, "")
	}
}

// allPages reads every page of a listing: fetch reads the page of token
// next ("" the first) and returns it with the token of the one after ("" at
// the end).
func allPages[T any](fetch func(next string) ([]T, string, error)) ([]T, error) {
	var all []T
	next := ""
	for {
		page, after, err := fetch(next)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if after == "" {
			return all, nil
		}
		next = after
	}
}
