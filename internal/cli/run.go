package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/internal/localsock"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/sdk"
)

type runOptions struct {
	template string
	image    string
	env      []string
	cwd      string
	user     string
	timeout  time.Duration
	cpus     float64
	memoryMB int
	disk     sizeFlag
	keep     bool
	argv     []string
	// api says how to reach a daemon; local runs an embedded engine even
	// when one answers.
	api   apiOptions
	local bool
	// imageRoot is hidden: tests point the embedded engine at a shared,
	// already built image store.
	imageRoot string
}

func newRunCmd(g *globals) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run [--template NAME | --image REF] -- CMD [ARG...]",
		Short: "Run one command in a fresh sandbox, stream its output, and exit with its code",
		Long: `Run one command in a fresh sandbox, stream its output, and exit with its code.

When a ` + "`tupper serve`" + ` is reachable, the sandbox is its: --api-url, else
$TUPPER_API_URL or $E2B_API_URL, else the local socket of --root's daemon (no
API key needed as root or group ` + localsock.Group + `), else, when an API key is set,
` + defaultAPIURL + ` if a daemon answers there. Otherwise, or with --local, run
needs no daemon: it runs the sandbox itself on --root, on --backend NAME, else
this host's default backend (` + local.DefaultBackend + `).`,
		Example: `  tupper run -- python3 -c 'print(6*7)'
  tupper run --image alpine:3 --env GREETING=hi -- sh -c 'echo $GREETING'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.argv = args
			return runRun(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.template, "template", "", "template to start from (default base)")
	f.StringVar(&o.image, "image", "", "image reference to start from instead of a template")
	f.StringArrayVarP(&o.env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringVar(&o.cwd, "cwd", "", "working directory (default the user's home)")
	f.StringVarP(&o.user, "user", "u", "", "user to run as (default user; root is allowed)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "kill the command after this long (0: never)")
	f.Float64Var(&o.cpus, "cpu", 0, "CPU cores (default 1)")
	f.IntVar(&o.memoryMB, "memory", 0, "memory limit in MB (default 1024)")
	f.Var(&o.disk, "disk", "disk size, /tmp included, such as 2G or 512M (default 10G)")
	f.BoolVar(&o.keep, "keep", false, "leave the sandbox running afterwards and print its id")
	f.BoolVar(&o.local, "local", false, "run the sandbox in an embedded engine even when a daemon is reachable")
	addAPIFlags(cmd, &o.api)
	f.StringVar(&o.imageRoot, "image-root", "", "image store directory of the embedded engine (default <root>/images)")
	_ = f.MarkHidden("image-root")
	return cmd
}

func runRun(ctx context.Context, g *globals, o *runOptions) error {
	env, err := parsePairs("--env", o.env)
	if err != nil {
		return err
	}
	client, backend, closeClient, err := o.sandboxes(ctx, g)
	if err != nil {
		return err
	}
	defer closeClient()
	// The sandbox must outlive the command's own timeout but not linger
	// after a crash of this process: give it a little more.
	life := 24 * time.Hour
	if o.timeout > 0 && !o.keep {
		life = o.timeout + time.Minute
	}
	sb, err := client.Create(ctx, sdk.CreateOptions{
		Template: o.template, Image: o.image, Envs: env, Timeout: life, CPUs: o.cpus, MemoryMB: o.memoryMB, DiskMB: o.disk.mb,
		Backend: backend,
	})
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(g.stderr, "sandbox:", sb.ID())
	} else {
		defer func() {
			killCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			sb.Kill(killCtx)
		}()
	}
	opts := []sdk.CommandOption{
		sdk.WithTimeout(o.timeout),
		// The output goes straight to our stdout; the handle keeps none.
		sdk.WithMaxOutput(-1),
		sdk.WithOnStdout(func(s string) { fmt.Fprint(g.stdout, s) }),
		sdk.WithOnStderr(func(s string) { fmt.Fprint(g.stderr, s) }),
	}
	if o.cwd != "" {
		opts = append(opts, sdk.WithCwd(o.cwd))
	}
	if o.user != "" {
		opts = append(opts, sdk.WithUser(o.user))
	}
	_, err = sb.Commands.Run(ctx, shellJoin(o.argv), opts...)
	var exit *sdk.CommandExitError
	if errors.As(err, &exit) {
		return &exitError{code: exit.ExitCode}
	}
	return err
}

// sandboxes returns the client that runs the sandbox: a reachable daemon's
// (see findDaemon), else an embedded engine's on --root; the backend the
// create must ask for (--backend, which a daemon is told and an embedded
// engine opens as its default); and what closes the client.
func (o *runOptions) sandboxes(ctx context.Context, g *globals) (*sdk.Client, string, func(), error) {
	if !o.local {
		// The default address is asked only with a key: without one, a
		// daemon there is not this root's (which would have its socket)
		// and could not be used anyway.
		t, err := findDaemon(ctx, g.root, o.api.url, o.api.key, false)
		if err != nil {
			return nil, "", nil, err
		}
		if t != nil {
			if len(g.backendOpts) > 0 {
				return nil, "", nil, fmt.Errorf("--backend-opt sets up an embedded engine, but the daemon at %s runs the sandbox with its own: drop it, or pass --local", t.APIURL())
			}
			return &sdk.Client{Transport: t}, g.backend, func() {}, nil
		}
	}
	rt, err := g.openLocal(ctx, o.imageRoot)
	if err != nil {
		return nil, "", nil, err
	}
	return &sdk.Client{Transport: rt}, "", func() { rt.Close() }, nil
}

// parsePairs turns KEY=VALUE flags into a map.
func parsePairs(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, p)
		}
		out[k] = v
	}
	return out, nil
}

// shellJoin quotes argv for bash -c so that every argument arrives as given.
func shellJoin(argv []string) string {
	if len(argv) == 1 {
		// A single argument is taken as a shell command line, so that
		// `tupper run -- 'echo $HOME | wc -c'` works as typed.
		return argv[0]
	}
	quoted := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			quoted[i] = a
			continue
		}
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(quoted, " ")
}
