package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/localsock"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/mcp"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/sdk"
	"github.com/lightbearco/tupper/server"
	"github.com/lightbearco/tupper/template"
)

type serveOptions struct {
	addr                string
	domain              string
	certFile, keyFile   string
	allowInsecureRemote bool
	// imageRoot and defaultTemplate are hidden: tests point the daemon at
	// a shared, already built image store and name its default image.
	imageRoot       string
	defaultTemplate string
	// killOnExit kills every sandbox when the daemon stops; by default
	// they keep running and the next start re-attaches to them.
	killOnExit bool
	net        networkFlags
	admit      admissionFlags
	// disk and maxDisk are each sandbox's default and largest disk cap.
	disk, maxDisk sizeFlag
	// buildEgress is the egress of template build sandboxes: "allow" or
	// "deny".
	buildEgress string
	// warm are the warm pools, TEMPLATE=N each; warmMemory bounds them.
	warm       []string
	warmMemory sizeFlag
	// cpus, memory and pids are each sandbox's default limits.
	cpus   float64
	memory sizeFlag
	pids   int64
	// reserveMemory and reserveTasks are what the host keeps from all
	// sandboxes together; overcommit bounds their limits added up. They
	// are the gvisor backend's options.
	reserveMemory sizeFlag
	reserveTasks  int64
	overcommit    float64
}

func newServeCmd(g *globals) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the E2B-compatible API, so that the E2B SDKs use local sandboxes",
		Long: `Serve the E2B-compatible API on one port: the control plane (create, list,
kill sandboxes) and the data plane (commands, files) of every sandbox.

Point the E2B SDKs at it with
  E2B_API_URL=http://127.0.0.1:3000 E2B_SANDBOX_URL=http://127.0.0.1:3000 E2B_API_KEY=e2b_…

The first start creates an API key and prints it once. On this host no key is
needed: the daemon also listens on a unix socket (/run/tupper.sock for the
default --root, /run/tupper-<hash>.sock for another), where root and the
members of group tupper act as the first key does; the CLI, ` + "`tupper mcp`" + ` and
the Go SDK use it when no URL is set.

Sandboxes run on the backend --backend names, else on this host's default:
` + local.DefaultBackend + `. A create may ask for another backend built into tupper: the API's
"backend" field (Tupper's extension), ` + "`tupper create --backend NAME`" + `, or the
Go SDK's CreateOptions.Backend. The daemon opens it on first use, under
<root>/backends/NAME, once its self-check says it works on this host;
` + "`tupper doctor`" + ` lists the backends and what each one needs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", server.DefaultAddr, "address to listen on")
	f.StringVar(&o.domain, "domain", "", `domain of getHost(port) URLs, "<port>-<id>.<domain>" (default localhost:<port of --addr>)`)
	f.StringVar(&o.certFile, "tls-cert", "", "TLS certificate file (serve HTTPS)")
	f.StringVar(&o.keyFile, "tls-key", "", "TLS key file")
	f.BoolVar(&o.allowInsecureRemote, "allow-insecure-remote", false, "allow plain HTTP on an address other than loopback (keys cross the network in the clear)")
	f.BoolVar(&o.killOnExit, "kill-on-exit", false, "kill every sandbox when the daemon stops (default: leave them running; the next start re-attaches)")
	f.StringVar(&o.imageRoot, "image-root", "", "image store directory (default <root>/images)")
	f.StringVar(&o.defaultTemplate, "default-template", "", `template of creates that name none (default "base")`)
	f.Var(&o.disk, "disk", "disk size of each sandbox (its writes, /tmp included) unless its create asks for another, such as 10G (default 10G, or --max-disk when smaller)")
	f.Var(&o.maxDisk, "max-disk", "largest disk size a create may ask for (default 100G, or --disk when larger)")
	f.Float64Var(&o.cpus, "cpus", 0, "CPUs of each sandbox unless its create or template asks for others (default 1)")
	f.Var(&o.memory, "memory", "memory of each sandbox unless its create or template asks for other, such as 512M (default 1G)")
	f.Int64Var(&o.pids, "pids", 0, "tasks (processes and threads) each sandbox may hold (default 1024); on gVisor the host's task budget admits more sandboxes the lower it is")
	f.Var(&o.reserveMemory, "host-reserve-memory", "memory the host keeps from all sandboxes together, such as 2G: their parent cgroup gets the rest (default 1G or 1/16 of the host's, whichever is more; gvisor)")
	f.Int64Var(&o.reserveTasks, "host-reserve-tasks", 0, "host tasks the host keeps from all sandboxes together (default a quarter of kernel.pid_max or threads-max, at least 4096; gvisor)")
	f.Float64Var(&o.overcommit, "overcommit", 0, "how many times what the host spares sandboxes their limits may add up to; admission counts what they use (default 32; gvisor)")
	f.StringSliceVar(&o.warm, "warm", nil, "keep N sandboxes of TEMPLATE booted ahead of demand (TEMPLATE=N; repeatable): creates of it with default limits, no environment variables and no volumes take one at once")
	f.Var(&o.warmMemory, "warm-memory", "the most memory all warm sandboxes may be given together, such as 4G (default a quarter of the host's)")
	f.StringVar(&o.buildEgress, "build-egress", "allow", `egress of template build sandboxes: "allow" (apt, pip and npm installs reach the internet) or "deny"`)
	o.net.register(f)
	o.admit.register(f)
	_ = f.MarkHidden("image-root")
	_ = f.MarkHidden("default-template")
	return cmd
}

func runServe(ctx context.Context, g *globals, o *serveOptions) error {
	root := g.root
	if root == "" {
		root = os.Getenv("TUPPER_ROOT")
	}
	if root == "" {
		root = local.DefaultRoot
	}
	listen := server.ListenOptions{
		Addr: o.addr, CertFile: o.certFile, KeyFile: o.keyFile, AllowInsecureRemote: o.allowInsecureRemote,
	}
	// Listen first: a refused address must fail before anything is made.
	ln, err := server.Listen(ctx, listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	scheme := "http"
	if o.certFile != "" {
		scheme = "https"
	}
	url := scheme + "://" + ln.Addr().String()
	domain := o.domain
	if domain == "" {
		// From the listener, not --addr: ":0" picks its port at Listen.
		_, port, err := net.SplitHostPort(ln.Addr().String())
		if err != nil {
			return fmt.Errorf("listener address %q: %w", ln.Addr(), err)
		}
		domain = "localhost:" + port
	}
	keys, err := auth.Open(filepath.Join(root, "server", "keys.db"))
	if err != nil {
		return err
	}
	defer keys.Close()
	first, err := keys.EnsureFirstKey(ctx, "default")
	if err != nil {
		return err
	}
	if first != "" {
		// Printed at once: should the start fail below, the key must not
		// be lost, since it is never shown again.
		fmt.Fprintf(g.stderr, "Created the first API key. It is shown only this once:\n\n"+
			"  export E2B_API_KEY=%s\n  export E2B_API_URL=%s\n  export E2B_SANDBOX_URL=%s\n\n", first, url, url)
	}
	log := g.loggerAt(slog.LevelInfo)
	if err := shieldDaemon(); err != nil {
		log.Warn("the host's OOM killer may pick the daemon before sandboxes: its oom_score_adj stays", "err", err)
	}
	hostNet, defaultPolicy, err := o.net.config()
	if err != nil {
		return err
	}
	backendOpts, err := g.backendOptions()
	if err != nil {
		return err
	}
	if backendOpts, err = o.hostBudgetOptions(g, backendOpts); err != nil {
		return err
	}
	pools, err := parseWarm(o.warm)
	if err != nil {
		return err
	}
	rt, err := local.Open(ctx, local.Config{
		Root: root, ImageRoot: o.imageRoot, Backend: g.backend, BackendOptions: backendOpts, Logger: log, Network: hostNet,
		Engine: engine.Config{
			DefaultTemplate: o.defaultTemplate, DefaultNetwork: defaultPolicy,
			DefaultDiskMB: o.disk.mb, MaxDiskMB: o.maxDisk.mb,
			DefaultCPUs: o.cpus, DefaultMemoryMB: o.memory.mb, DefaultPids: o.pids,
			MaxCreating: o.admit.creating, MaxQueued: o.admit.queued, QueueWait: o.admit.queueWait, MaxSandboxes: o.admit.sandboxes,
			MaxSandboxesPerTeam: o.admit.perTeam,
			WarmPools:           pools, WarmMemoryMB: o.warmMemory.mb,
		},
	})
	if err != nil {
		return err
	}
	defer rt.Close()
	mcpHandler, err := mcp.Handler(mcp.Config{Client: &sdk.Client{Transport: rt}, Logger: log, Scope: mcpKeyScope}, keys)
	if err != nil {
		return err
	}
	var buildNet *netpolicy.Policy
	switch o.buildEgress {
	case "allow":
	case "deny":
		buildNet = &netpolicy.Policy{DenyOut: []string{netpolicy.AllTrafficV4, netpolicy.AllTrafficV6}}
	default:
		return fmt.Errorf(`--build-egress %q: want "allow" or "deny": %w`, o.buildEgress, errdefs.ErrInvalidArgument)
	}
	builder, err := template.New(template.Config{
		Root: filepath.Join(root, "templates"), Engine: rt.Engine(), Images: rt.Images(),
		Sandboxes: &sdk.Client{Transport: rt}, Network: buildNet, Logger: log,
	})
	if err != nil {
		return err
	}
	defer builder.Close()
	srv, err := server.New(server.Config{
		Engine: rt.Engine(), Keys: keys, Domain: domain, MCP: mcpHandler, Logger: log, Templates: builder,
		URL: reachableURL(scheme, ln.Addr()),
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	if listen.Socket, err = listenSocket(root, log); err != nil {
		return err
	}
	fmt.Fprintf(g.stderr, "tupper serve: listening on %s\n", url)
	if listen.Socket != nil {
		fmt.Fprintf(g.stderr, "tupper serve: and on %s, where root and group %s need no API key\n", localsock.URL(listen.Socket.Addr().String()), localsock.Group)
	}
	fmt.Fprintf(g.stderr, "tupper serve: web dashboard at %s/dashboard/ (`tupper dashboard` prints a link that signs in)\n", reachableURL(scheme, ln.Addr()))
	err = server.Serve(ctx, ln, srv, listen)
	if o.killOnExit {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if kerr := rt.Engine().KillAll(kctx); kerr != nil {
			err = errors.Join(err, fmt.Errorf("kill sandboxes on exit: %w", kerr))
		}
	}
	return err
}

// parseWarm reads the --warm flags, TEMPLATE=N each.
func parseWarm(flags []string) ([]engine.PoolConfig, error) {
	var out []engine.PoolConfig
	for _, f := range flags {
		name, n, ok := strings.Cut(f, "=")
		size, err := strconv.Atoi(n)
		if !ok || name == "" || err != nil || size < 0 || size > 1000 {
			return nil, fmt.Errorf("--warm %q: want TEMPLATE=N, N from 0 to 1000: %w", f, errdefs.ErrInvalidArgument)
		}
		out = append(out, engine.PoolConfig{Template: name, Size: size})
	}
	return out, nil
}

// hostBudgetOptions adds --host-reserve-memory, --host-reserve-tasks and
// --overcommit to opts as the gvisor backend's options, and refuses them
// for a daemon whose default backend is another.
func (o *serveOptions) hostBudgetOptions(g *globals, opts map[string]string) (map[string]string, error) {
	set := map[string]string{}
	if o.reserveMemory.mb > 0 {
		set["reserve-memory"] = strconv.FormatInt(int64(o.reserveMemory.mb)<<20, 10)
	}
	if o.reserveTasks != 0 {
		set["reserve-tasks"] = strconv.FormatInt(o.reserveTasks, 10)
	}
	if o.overcommit != 0 {
		set["overcommit"] = strconv.FormatFloat(o.overcommit, 'g', -1, 64)
	}
	if len(set) == 0 {
		return opts, nil
	}
	if g.backend != "" && g.backend != "gvisor" {
		return nil, fmt.Errorf("--host-reserve-memory, --host-reserve-tasks and --overcommit hold the gvisor backend's sandboxes, not %s's: %w", g.backend, errdefs.ErrInvalidArgument)
	}
	if opts == nil {
		opts = map[string]string{}
	}
	for k, v := range set {
		opts[k] = v
	}
	return opts, nil
}
