package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
)

// egressFlags are the egress policy flags of `tupper create` and `tupper
// network`.
type egressFlags struct {
	allowOut   []string
	denyOut    []string
	noInternet bool
	headers    []string
}

func (e *egressFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringSliceVar(&e.allowOut, "allow-out", nil, "destination the sandbox may reach: CIDR, IP, domain or *.domain; wins over --deny-out (repeatable)")
	f.StringSliceVar(&e.denyOut, "deny-out", nil, "destination the sandbox may not reach: CIDR or IP; 0.0.0.0/0 denies everything --allow-out does not name (repeatable)")
	f.BoolVar(&e.noInternet, "no-internet", false, "deny all egress but what --allow-out names")
	f.StringArrayVar(&e.headers, "header", nil, `header the host adds to the sandbox's HTTPS requests to a domain, "DOMAIN:Name: value"; the value never enters the sandbox (repeatable)`)
}

// set reports whether any egress flag was given.
func (e *egressFlags) set() bool {
	return len(e.allowOut)+len(e.denyOut)+len(e.headers) > 0 || e.noInternet
}

// policy returns the policy the flags describe, and the internet switch.
func (e *egressFlags) policy() (*sdk.NetworkPolicy, *bool, error) {
	p := &sdk.NetworkPolicy{AllowOut: e.allowOut, DenyOut: e.denyOut}
	for _, h := range e.headers {
		domain, header, ok := strings.Cut(h, ":")
		name, value, ok2 := strings.Cut(header, ":")
		if !ok || !ok2 || domain == "" || strings.TrimSpace(name) == "" {
			return nil, nil, fmt.Errorf(`--header %q: want "DOMAIN:Name: value", for example "api.example.com:Authorization: Bearer …"`, h)
		}
		if p.Rules == nil {
			p.Rules = map[string][]sdk.NetworkRule{}
		}
		p.Rules[domain] = append(p.Rules[domain], sdk.NetworkRule{Transform: &sdk.NetworkTransform{
			Headers: map[string]string{strings.TrimSpace(name): strings.TrimSpace(value)},
		}})
	}
	var internet *bool
	if e.noInternet {
		f := false
		internet = &f
	}
	return p, internet, nil
}

type networkOptions struct {
	api    apiOptions
	id     string
	egress egressFlags
}

func newNetworkCmd(g *globals) *cobra.Command {
	o := &networkOptions{}
	cmd := &cobra.Command{
		Use:   "network ID [--allow-out X]... [--deny-out Y]... [--no-internet] [--header DOMAIN:Name: value]...",
		Short: "Replace the egress policy of a running sandbox",
		Long: `Replace the egress policy of a running sandbox at once, as E2B's updateNetwork
does: what the flags leave out is cleared (no flags at all: the internet is open
again), and open connections the new policy denies are cut.

Whatever the policy, a sandbox never reaches the host, other sandboxes, private,
link-local or metadata addresses, unless the daemon was started with
--allow-internal for them.`,
		Example: `  tupper network "$id" --allow-out pypi.org --allow-out files.pythonhosted.org --no-internet
  tupper network "$id" --deny-out 203.0.113.0/24
  tupper network log "$id"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.id = args[0]
			return runNetwork(cmd.Context(), g, o)
		},
	}
	o.egress.register(cmd)
	addAPIFlags(cmd, &o.api)
	cmd.AddCommand(newNetworkLogCmd(g))
	return cmd
}

func runNetwork(ctx context.Context, g *globals, o *networkOptions) error {
	policy, internet, err := o.egress.policy()
	if err != nil {
		return err
	}
	r, sb, err := o.api.sandbox(ctx, o.id)
	if err != nil {
		return err
	}
	return r.control(sb.SetNetwork(ctx, policy, internet), o.id)
}

type networkLogOptions struct {
	api  apiOptions
	id   string
	json bool
}

func newNetworkLogCmd(g *globals) *cobra.Command {
	o := &networkLogOptions{}
	cmd := &cobra.Command{
		Use:   "log ID",
		Short: "Show the connections and lookups a sandbox's policy refused lately",
		Long: `Show the recent connections and DNS lookups of a sandbox that its egress
policy refused, oldest first, with the rule that refused each: the first place
to look when ` + "`pip install`" + ` or ` + "`git clone`" + ` fails in a sandbox.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.id = args[0]
			return runNetworkLog(cmd.Context(), g, o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runNetworkLog(ctx context.Context, g *globals, o *networkLogOptions) error {
	r, sb, err := o.api.sandbox(ctx, o.id)
	if err != nil {
		return err
	}
	list, err := sb.NetworkDenials(ctx)
	if err != nil {
		return r.control(err, o.id)
	}
	if o.json {
		if list == nil {
			list = []sdk.NetworkDenial{}
		}
		return printJSON(g.stdout, list)
	}
	return printDenials(g.stdout, list)
}

func printDenials(w io.Writer, list []sdk.NetworkDenial) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "No connection or lookup was refused.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tDESTINATION\tHOST\tRULE")
	for _, d := range list {
		host := d.Host
		if host == "" {
			host = "-"
		}
		kind := d.Kind
		if d.Protocol != "" {
			kind += "/" + d.Protocol
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Time.Local().Format(time.TimeOnly), kind, d.Destination, host, d.Rule)
	}
	return tw.Flush()
}
