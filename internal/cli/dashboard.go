package cli

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	cmd.Flags().BoolVar(&o.open, "open", false, "open the link in a browser too (with xdg-open, through a page in your cache directory that only you can read: a command line is visible to every user)")
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
	page, err := writeOpenPage(url)
	if err != nil {
		fmt.Fprintf(g.stderr, "Cannot open a browser safely (%v): open the link yourself.\n", err)
		return nil
	}
	cmd := exec.Command(opener, page)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("open a browser: %w", err)
	}
	// The browser outlives this command; xdg-open is not waited for.
	return cmd.Process.Release()
}

// openPageName is the file, in the user's cache directory, through which
// --open hands the link to the browser.
const openPageName = "dashboard-link.html"

// writeOpenPage writes a page that sends the browser on to link, readable
// by this user alone, and returns its path. The browser is given the page
// rather than the link: a command line (xdg-open's, the browser's) is
// readable by every user of the host while it runs, in /proc/PID/cmdline,
// and whoever read the link there could sign in with it first. Each call
// replaces the page of the one before; the link in it works once.
func writeOpenPage(link string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "tupper")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, openPageName)
	// Made anew, so that its mode is 0600 whatever an older one's was.
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	u := html.EscapeString(link)
	_, err = fmt.Fprintf(f, `<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=%s"><title>Tupper</title></head>
<body><a href="%s">Open the Tupper dashboard</a></body></html>
`, u, u)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", err
	}
	return path, nil
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
