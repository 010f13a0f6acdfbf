package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/network"
)

func newCleanupCmd(g *globals) *cobra.Command {
	var asJSON, leave bool
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Leave the host's network as Tupper found it, once no daemon runs",
		Long: "cleanup removes what Tupper put on the host's network: its nftables table, the accepts it added\n" +
			"to the host's firewalls, its routes, its records and lock files in /run/tupper, and the forwarding\n" +
			"it turned on, unless another program relies on it. It does nothing while a Tupper process uses the\n" +
			"network or a sandbox remains, and says so. The last daemon to stop does the same by itself.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCleanup(cmd.Context(), g, asJSON, leave) },
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&leave, "leave-host-firewalls", false, "leave the accepts in the host's firewalls (Docker's, ufw's, firewalld's) where they are, as for a daemon run with --host-firewall=off")
	return cmd
}

func runCleanup(ctx context.Context, g *globals, asJSON, leaveFirewalls bool) error {
	rep, err := network.HostCleanup(ctx, leaveFirewalls)
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	if asJSON {
		return printJSON(g.stdout, rep)
	}
	printCleanup(g, rep)
	return nil
}
