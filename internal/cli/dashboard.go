package cli

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

type dashboardOptions struct {
	api  apiOptions
	open bool
}

func newDashboardCmd(g *globals) *cobra.Command {
	o := &dashboardOptions{}
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Print a one-time link that opens the web dashboard of `tupper serve`, signed in",
		Long: `Ask the daemon for a link to its web dashboard that signs the browser in with
the rights of this command's credential (the local socket's trust, or the API
key), without typing a key. The link works once, within 5 minutes; the session
it opens lasts 12 hours, or until you sign out. It is printed alone on standard
output. Anyone can also open /dashboard/ on the daemon's address and sign in
with an API key.`,
		Example: `  tupper dashboard
  tupper dashboard --open`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDashboard(cmd.Context(), g, o)
		},
	}
	cmd.Flags().BoolVar(&o.open, "open", false, "open the link in a browser too (with xdg-open)")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runDashboard(ctx context.Context, g *globals, o *dashboardOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	link, err := r.DashboardLink(ctx)
	if err != nil {
		return r.control(err, "")
	}
	url := link.URL
	if strings.HasPrefix(url, "/") && (strings.HasPrefix(r.url, "http://") || strings.HasPrefix(r.url, "https://")) {
		// A daemon that does not know its own address answers a path.
		url = strings.TrimSuffix(r.url, "/") + url
	}
	fmt.Fprintf(g.stderr, "Open the dashboard with this link; it works once, until %s:\n", link.ExpiresAt.Local().Format(time.TimeOnly))
	fmt.Fprintln(g.stdout, url)
	if !o.open {
		return nil
	}
	opener, err := exec.LookPath("xdg-open")
	if err != nil {
		fmt.Fprintln(g.stderr, "No xdg-open here to open a browser with: open the link yourself.")
		return nil
	}
	cmd := exec.Command(opener, url)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("open a browser: %w", err)
	}
	// The browser outlives this command; xdg-open is not waited for.
	return cmd.Process.Release()
}

// reachableURL is the URL at which a browser on this host reaches a
// server listening on addr: an unspecified address (0.0.0.0, ::) is
// reached at localhost.
func reachableURL(scheme string, addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme + "://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}
