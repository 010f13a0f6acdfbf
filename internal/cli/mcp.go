package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/localsock"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/mcp"
	"github.com/lightbearco/tupper/sdk"
)

// defaultDaemonURL is where `tupper mcp` looks for a daemon when no URL is
// configured: `tupper serve`'s default address.
const defaultDaemonURL = "http://127.0.0.1:3000"

// mcpSessionTag names the sandboxes one embedded `tupper mcp` made, so
// that it kills them when it stops: nothing else would enforce their
// timeouts once its engine is gone.
const mcpSessionTag = "tupper-mcp-session"

type mcpOptions struct {
	url         string
	local       bool
	timeout     time.Duration
	outputLimit int
	// imageRoot and defaultTemplate are hidden: tests point the embedded
	// engine at a shared, already built image store.
	imageRoot       string
	defaultTemplate string
}

func newMCPCmd(g *globals) *cobra.Command {
	o := &mcpOptions{}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve sandboxes as MCP tools over stdio, for Claude Desktop, Cursor and other MCP clients",
		Long: `Serve Tupper's MCP tools (create_sandbox, run_command, run_code, read_file…) on
standard input and output, for an MCP client to start as a subprocess.

It talks to a running ` + "`tupper serve`" + ` when one is configured or answers:
--url, else $TUPPER_API_URL or $E2B_API_URL, else the local socket of --root's
daemon (no API key needed as root or group ` + localsock.Group + `), else ` + defaultDaemonURL + `
when a daemon listens there; the API key comes from $TUPPER_API_KEY or $E2B_API_KEY.
Otherwise (or with --local) it runs an embedded engine on --root, which needs
root and runsc; its sandboxes end when it stops.

Streamable HTTP is served by ` + "`tupper serve`" + ` at /mcp.`,
		Example: `  # In an MCP client's configuration:
  {"mcpServers": {"tupper": {"command": "tupper", "args": ["mcp"],
    "env": {"TUPPER_API_KEY": "e2b_…"}}}}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMCP(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.url, "url", "", "URL of the daemon (tupper serve) to use (default $TUPPER_API_URL, $E2B_API_URL, or "+defaultDaemonURL+" when it answers)")
	f.BoolVar(&o.local, "local", false, "run an embedded engine even when a daemon answers")
	f.DurationVar(&o.timeout, "timeout", mcp.DefaultTimeout, "idle timeout of sandboxes whose create names none")
	f.IntVar(&o.outputLimit, "output-limit", mcp.DefaultOutputLimit, "bytes of each command output or file content a tool returns")
	f.StringVar(&o.imageRoot, "image-root", "", "image store directory of the embedded engine (default <root>/images)")
	f.StringVar(&o.defaultTemplate, "default-template", "", `template of creates that name none (default "base")`)
	_ = f.MarkHidden("image-root")
	_ = f.MarkHidden("default-template")
	return cmd
}

func runMCP(ctx context.Context, g *globals, o *mcpOptions) error {
	log := g.logger()
	cfg := mcp.Config{DefaultTimeout: o.timeout, OutputLimit: o.outputLimit, Logger: log}
	transport, err := o.daemon(ctx, g.root)
	if err != nil {
		return err
	}
	if transport != nil {
		log.Info("using the daemon", "url", transport.APIURL())
		cfg.Client = &sdk.Client{Transport: transport}
	} else {
		backendOpts, err := g.backendOptions()
		if err != nil {
			return err
		}
		rt, err := local.Open(ctx, local.Config{
			Root: g.root, ImageRoot: o.imageRoot, Backend: g.backend, BackendOptions: backendOpts, Logger: log,
			Engine: engine.Config{DefaultTemplate: o.defaultTemplate},
		})
		if err != nil {
			return fmt.Errorf("start the embedded engine (or run `tupper serve` and set TUPPER_API_KEY): %w", err)
		}
		defer rt.Close()
		session := newSessionID()
		cfg.Client = &sdk.Client{Transport: rt}
		cfg.Tags = map[string]string{mcpSessionTag: session}
		defer killSession(cfg.Client, session, g)
	}
	srv, err := mcp.NewServer(cfg)
	if err != nil {
		return err
	}
	err = srv.Run(ctx, &mcpsdk.IOTransport{Reader: io.NopCloser(g.stdin), Writer: nopWriteCloser{g.stdout}})
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, io.EOF)) {
		// The client went away or asked us to stop: a normal end.
		return nil
	}
	return err
}

// daemon returns the HTTP transport of the daemon to use (see findDaemon),
// or nil when the embedded engine should run on root.
func (o *mcpOptions) daemon(ctx context.Context, root string) (*sdk.HTTPTransport, error) {
	if o.local {
		return nil, nil
	}
	return findDaemon(ctx, root, o.url, "", true)
}

// answers reports whether something accepts connections at rawURL's host.
func answers(ctx context.Context, rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func newSessionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// killSession kills the sandboxes an embedded server made, on a context of
// its own: the command's may be cancelled already.
func killSession(client *sdk.Client, session string, g *globals) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sbs, _, err := client.List(ctx, sdk.ListOptions{Metadata: map[string]string{mcpSessionTag: session}})
	if err != nil {
		fmt.Fprintln(g.stderr, "tupper mcp: list this session's sandboxes:", err)
		return
	}
	for _, sb := range sbs {
		if err := client.Kill(ctx, sb.SandboxID); err != nil && !sdk.IsNotFound(err) {
			fmt.Fprintf(g.stderr, "tupper mcp: kill sandbox %s: %v\n", sb.SandboxID, err)
		}
	}
}

// nopWriteCloser lets the transport close standard output without closing
// the caller's writer.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
