package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
	"github.com/lightbearco/tupper/secret"
)

func newSecretCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "secret",
		Aliases: []string{"secrets"},
		Short:   "Keep secrets that sandboxes' network rules send as headers (create, update, ls, rm)",
		Long: `A secret is a value, such as an API key, that ` + "`tupper serve`" + ` keeps sealed for your
team and that a sandbox's network rules send as an HTTP header, without the
value ever entering the sandbox: name it in a rule's header as
${e2b.secrets.NAME}, and the daemon's egress proxy puts the value in as each
HTTPS request leaves. No command shows a value again once it is stored.

The value is read from --value-file, or else from standard input, never from
the command line (where it would stay in the shell's history and in the
process list); one trailing line break is dropped.`,
		Example: `  printf %s "$OPENAI_API_KEY" | tupper secret create openai
  tupper create --allow-out api.openai.com --deny-out 0.0.0.0/0 \
    --header 'api.openai.com:Authorization: Bearer ${e2b.secrets.openai}'
  tupper secret update openai --value-file ./new-key
  tupper secret rm openai`,
	}
	cmd.AddCommand(newSecretCreateCmd(g), newSecretUpdateCmd(g), newSecretLsCmd(g), newSecretRmCmd(g))
	return cmd
}

// secretJSON is how the CLI prints a secret with --json: the API's field
// names.
type secretJSON struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

func toSecretJSON(s *sdk.SecretInfo) secretJSON {
	md := s.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return secretJSON{SecretID: s.SecretID, Name: s.Name, CurrentVersion: s.Version, Metadata: md, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// secretValueOptions say where a secret's value comes from.
type secretValueOptions struct {
	valueFile string
}

func (o *secretValueOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.valueFile, "value-file", "", "read the value from `FILE` (default: standard input; - is standard input too)")
}

// read returns the value: the file's or standard input's content, less
// one trailing line break.
func (o *secretValueOptions) read(g *globals) (string, error) {
	in, from := g.stdin, "standard input"
	if o.valueFile != "" && o.valueFile != "-" {
		f, err := os.Open(o.valueFile)
		if err != nil {
			return "", fmt.Errorf("--value-file: %w", err)
		}
		defer f.Close()
		in, from = f, o.valueFile
	} else if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintln(g.stderr, "Type the secret's value, then Ctrl-D (it is not echoed back by tupper, but your terminal shows what you type; piping it in is safer):")
	}
	if in == nil {
		return "", fmt.Errorf("no value: give --value-file or pipe the value in: %w", errdefs.ErrInvalidArgument)
	}
	data, err := io.ReadAll(io.LimitReader(in, secret.MaxValueBytes+3))
	if err != nil {
		return "", fmt.Errorf("read the value from %s: %w", from, err)
	}
	if bytes.HasSuffix(data, []byte("\r\n")) {
		data = data[:len(data)-2]
	} else if bytes.HasSuffix(data, []byte("\n")) {
		data = data[:len(data)-1]
	}
	switch {
	case len(data) == 0:
		return "", fmt.Errorf("the value read from %s is empty: %w", from, errdefs.ErrInvalidArgument)
	case len(data) > secret.MaxValueBytes:
		return "", fmt.Errorf("the value read from %s is larger than %d bytes: %w", from, secret.MaxValueBytes, errdefs.ErrInvalidArgument)
	}
	return string(data), nil
}

// parseMetadata turns KEY=VALUE flags into a map.
func parseMetadata(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	md := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--metadata %q: want KEY=VALUE: %w", kv, errdefs.ErrInvalidArgument)
		}
		md[k] = v
	}
	return md, nil
}

// secretWriteOptions are the options of `secret create` (ref is the new
// secret's name) and `secret update` (ref names the secret).
type secretWriteOptions struct {
	api      apiOptions
	value    secretValueOptions
	ref      string
	metadata []string
	json     bool
}

// newSecretWriteCmd is `secret create` or `secret update`: use, short and
// the help of --metadata and --json say which; run does it.
func newSecretWriteCmd(g *globals, use, short, metadataHelp, jsonHelp string, run func(context.Context, *globals, *secretWriteOptions) error) *cobra.Command {
	o := &secretWriteOptions{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ref = args[0]
			return run(cmd.Context(), g, o)
		},
	}
	o.value.addFlags(cmd)
	cmd.Flags().StringArrayVar(&o.metadata, "metadata", nil, metadataHelp)
	cmd.Flags().BoolVar(&o.json, "json", false, jsonHelp)
	addAPIFlags(cmd, &o.api)
	return cmd
}

func newSecretCreateCmd(g *globals) *cobra.Command {
	return newSecretWriteCmd(g, "create NAME [--value-file FILE] [--metadata KEY=VALUE]...",
		"Store a new secret, its value read from a file or standard input, and print its id",
		"a `KEY=VALUE` to describe the secret by (repeatable)",
		"print the secret's description as JSON instead of its id", runSecretCreate)
}

func newSecretUpdateCmd(g *globals) *cobra.Command {
	return newSecretWriteCmd(g, "update NAME|ID [--value-file FILE] [--metadata KEY=VALUE]...",
		"Give a secret a new value (its next version); sandboxes send it from their next request on",
		"a `KEY=VALUE` that, with the others given, replaces the secret's metadata (repeatable; none keeps them)",
		"print the secret's description as JSON", runSecretUpdate)
}

// secretInput reads what a create or update sends: the metadata, the
// value, and a client of the daemon.
func secretInput(g *globals, o *secretWriteOptions) (map[string]string, string, *remote, error) {
	md, err := parseMetadata(o.metadata)
	if err != nil {
		return nil, "", nil, err
	}
	value, err := o.value.read(g)
	if err != nil {
		return nil, "", nil, err
	}
	r, err := o.api.dial()
	return md, value, r, err
}

func runSecretCreate(ctx context.Context, g *globals, o *secretWriteOptions) error {
	md, value, r, err := secretInput(g, o)
	if err != nil {
		return err
	}
	info, err := r.CreateSecret(ctx, o.ref, value, md)
	if err != nil {
		if sdk.IsAlreadyExists(err) {
			return fmt.Errorf("%w: change its value with `tupper secret update %s`", err, o.ref)
		}
		return r.control(err, "")
	}
	if o.json {
		return printJSON(g.stdout, toSecretJSON(info))
	}
	fmt.Fprintf(g.stderr, "Stored secret %q (version %d). Use it in a network rule's header as %s\n", info.Name, info.Version, sdk.SecretPlaceholder(info.Name))
	_, err = fmt.Fprintln(g.stdout, info.SecretID)
	return err
}

func runSecretUpdate(ctx context.Context, g *globals, o *secretWriteOptions) error {
	md, value, r, err := secretInput(g, o)
	if err != nil {
		return err
	}
	info, err := r.UpdateSecret(ctx, o.ref, value, md)
	if err != nil {
		return secretError(r, err, o.ref)
	}
	if o.json {
		return printJSON(g.stdout, toSecretJSON(info))
	}
	_, err = fmt.Fprintf(g.stdout, "secret %s is at version %d\n", info.Name, info.Version)
	return err
}

// secretError explains an error of a call about secret ref.
func secretError(r *remote, err error, ref string) error {
	if sdk.IsNotFound(err) {
		return fmt.Errorf("secret %s not found: run `tupper secret ls` to see your team's", ref)
	}
	return r.control(err, "")
}

type secretLsOptions struct {
	api  apiOptions
	json bool
}

func newSecretLsCmd(g *globals) *cobra.Command {
	o := &secretLsOptions{}
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your team's secrets, oldest first (never their values)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSecretLs(cmd.Context(), g, o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print a JSON array")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runSecretLs(ctx context.Context, g *globals, o *secretLsOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	all, err := allPages(func(next string) ([]sdk.SecretInfo, string, error) {
		return r.ListSecrets(ctx, sdk.SecretListOptions{Limit: 100, NextToken: next})
	})
	if err != nil {
		return r.control(err, "")
	}
	if o.json {
		out := make([]secretJSON, 0, len(all))
		for i := range all {
			out = append(out, toSecretJSON(&all[i]))
		}
		return printJSON(g.stdout, out)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSECRET ID\tVERSION\tUPDATED\tMETADATA")
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Name, s.SecretID, s.Version, s.UpdatedAt.Local().Format(time.DateTime), orDash(formatPairs(s.Metadata)))
	}
	return tw.Flush()
}

func newSecretRmCmd(g *globals) *cobra.Command { return newEachCmd(g, secretRmSpec()) }

// secretRmSpec is `tupper secret rm`.
func secretRmSpec() eachSpec {
	return eachSpec{
		use:     "rm NAME|ID...",
		short:   "Delete secrets; requests of sandboxes whose rules use one fail from then on",
		do:      func(ctx context.Context, r *remote, ref string) error { return r.DeleteSecret(ctx, ref) },
		explain: secretError,
	}
}
