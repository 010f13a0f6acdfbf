package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/local"
)

// The keys commands work on the daemon's key database directly, under the
// state root, so they need no running daemon; a running one sees their
// changes at its next request.

// stateRoot is the state directory: --root, else $TUPPER_ROOT, else
// local.DefaultRoot.
func (g *globals) stateRoot() string {
	if g.root != "" {
		return g.root
	}
	if r := os.Getenv("TUPPER_ROOT"); r != "" {
		return r
	}
	return local.DefaultRoot
}

// keysPath is where `tupper serve` keeps its API keys under root.
func keysPath(root string) string { return filepath.Join(root, "server", "keys.db") }

// errNoKeys is returned by openKeys for a state root that holds no key
// database yet.
var errNoKeys = errors.New("no key database")

// openKeys opens the key database under the state root; only create
// makes one where none is.
func (g *globals) openKeys(create bool) (*auth.Store, error) {
	path := keysPath(g.stateRoot())
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && !create {
		return nil, fmt.Errorf("%w at %s: `tupper serve --root %s` makes one at its first start, `tupper keys create` too", errNoKeys, path, g.stateRoot())
	}
	s, err := auth.Open(path)
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("%w: run as the user that runs `tupper serve` (usually root), or pass its --root", err)
	}
	return s, err
}

func newKeysCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "keys",
		Aliases: []string{"key"},
		Short:   "Manage the API keys that open `tupper serve`",
		Long: `Manage the API keys that open ` + "`tupper serve`" + `. They are kept, hashed, in the
daemon's state directory (--root), so these commands need no running daemon;
a running daemon sees their changes at once.

A key is shown only when it is made. Use it with the CLI and the SDKs:
  export TUPPER_API_KEY=$(tupper keys create --name laptop)
or, for the E2B SDKs, as E2B_API_KEY.

Every key belongs to a team, "` + auth.DefaultTeam + `" unless --team names another. A key
sees and touches only its own team's sandboxes, through every face of the
daemon (the E2B API, the data plane, /mcp); keys of one team share them.`,
	}
	cmd.AddCommand(newKeysCreateCmd(g), newKeysLsCmd(g), newKeysRmCmd(g))
	return cmd
}

type keysCreateOptions struct {
	name string
	team string
	json bool
}

func newKeysCreateCmd(g *globals) *cobra.Command {
	o := &keysCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create [--name NAME] [--team TEAM]",
		Short: "Make an API key and print it (it is shown only this once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runKeysCreate(cmd.Context(), g, o)
		},
	}
	cmd.Flags().StringVar(&o.name, "name", "", "a label to tell the key by (default its id)")
	cmd.Flags().StringVar(&o.team, "team", auth.DefaultTeam, "the team the key belongs to: it sees only that team's sandboxes")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the key and its record as JSON")
	return cmd
}

func runKeysCreate(ctx context.Context, g *globals, o *keysCreateOptions) error {
	s, err := g.openKeys(true)
	if err != nil {
		return err
	}
	defer s.Close()
	if o.team == "" {
		o.team = auth.DefaultTeam
	}
	plain, k, err := s.CreateInTeam(ctx, o.team, o.name)
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(g.stdout, struct {
			Key     string    `json:"key"`
			ID      string    `json:"id"`
			Name    string    `json:"name"`
			Team    string    `json:"team"`
			Hint    string    `json:"hint"`
			Created time.Time `json:"created"`
		}{plain, k.ID, k.Name, k.Team, k.Hint, k.Created})
	}
	// The key alone on stdout, so that $(tupper keys create) captures it.
	fmt.Fprintf(g.stderr, "Created API key %q (%s) in team %q. It is shown only this once; use it as TUPPER_API_KEY or E2B_API_KEY.\n", k.Name, k.ID, k.Team)
	_, err = fmt.Fprintln(g.stdout, plain)
	return err
}

type keysLsOptions struct {
	json bool
}

func newKeysLsCmd(g *globals) *cobra.Command {
	o := &keysLsOptions{}
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the API keys (never the keys themselves)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runKeysLs(cmd.Context(), g, o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print a JSON array")
	return cmd
}

func runKeysLs(ctx context.Context, g *globals, o *keysLsOptions) error {
	var keys []auth.Key
	s, err := g.openKeys(false)
	switch {
	case errors.Is(err, errNoKeys):
		// No database is no keys.
	case err != nil:
		return err
	default:
		defer s.Close()
		if keys, err = s.List(ctx); err != nil {
			return err
		}
	}
	if o.json {
		if keys == nil {
			keys = []auth.Key{}
		}
		return printJSON(g.stdout, keys)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTEAM\tKEY\tCREATED\tLAST USED")
	for _, k := range keys {
		used := "never"
		if !k.LastUsed.IsZero() {
			used = k.LastUsed.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Team, k.Hint, k.Created.Local().Format(time.DateTime), used)
	}
	return tw.Flush()
}

type keysRmOptions struct {
	keys []string
}

func newKeysRmCmd(g *globals) *cobra.Command {
	o := &keysRmOptions{}
	cmd := &cobra.Command{
		Use:     "rm ID|NAME...",
		Aliases: []string{"remove"},
		Short:   "Remove API keys; they stop working at once",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.keys = args
			return runKeysRm(cmd.Context(), g, o)
		},
	}
	return cmd
}

func runKeysRm(ctx context.Context, g *globals, o *keysRmOptions) error {
	s, err := g.openKeys(false)
	if err != nil {
		return err
	}
	defer s.Close()
	var errs []error
	for _, k := range o.keys {
		if err := s.Remove(ctx, k); errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("no API key has the id or name %q: run `tupper keys ls`", k))
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
