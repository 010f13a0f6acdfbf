package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
)

type createOptions struct {
	api      apiOptions
	template string
	image    string
	env      []string
	metadata []string
	cpus     float64
	memoryMB int
	disk     sizeFlag
	timeout  time.Duration
	json     bool
	egress   egressFlags
	// onTimeout and autoResume are the sandbox's lifecycle.
	onTimeout  string
	autoResume bool
}

func newCreateCmd(g *globals) *cobra.Command {
	o := &createOptions{}
	cmd := &cobra.Command{
		Use:   "create [--template NAME | --image REF] [--env K=V]... [--metadata K=V]...",
		Short: "Create a sandbox on `tupper serve` and print its id",
		Long: `Create a sandbox on a running ` + "`tupper serve`" + ` and print its id. The sandbox
lives until ` + "`tupper kill`" + ` or its timeout (the daemon's default, 5 minutes,
unless --timeout says otherwise; ` + "`tupper timeout`" + ` changes it later).

--on-timeout pause pauses it at its timeout instead (see ` + "`tupper pause`" + `): it waits,
saved to disk, for ` + "`tupper resume`" + `, or, with --auto-resume, for any request.

--template also names a snapshot (` + "`tupper snapshot create`" + `): the sandbox then starts
as the snapshot's sandbox was, processes and memory too.

--backend NAME runs it on that backend of the daemon's host rather than the
daemon's default (` + "`tupper doctor`" + ` on that host lists them and whether they work).`,
		Example: `  id=$(tupper create --metadata owner=me --timeout 1h)
  tupper exec "$id" -- python3 -c 'print(6*7)'
  tupper create --timeout 10m --on-timeout pause --auto-resume
  tupper create --backend runc`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCreate(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.template, "template", "", "template to start from (default: the daemon's, base)")
	f.StringVar(&o.image, "image", "", "image reference to start from instead of a template")
	f.StringArrayVarP(&o.env, "env", "e", nil, "environment variable of every command, KEY=VALUE (repeatable)")
	f.StringArrayVarP(&o.metadata, "metadata", "m", nil, "metadata to find the sandbox by, KEY=VALUE (repeatable)")
	f.Float64Var(&o.cpus, "cpu", 0, "CPU cores (default 1)")
	f.IntVar(&o.memoryMB, "memory", 0, "memory limit in MB (default 1024)")
	f.Var(&o.disk, "disk", "disk size, /tmp included, such as 2G or 512M (default: the daemon's, 10G)")
	f.DurationVar(&o.timeout, "timeout", 0, "time to live, for example 30m (default: the daemon's, 5m)")
	f.BoolVar(&o.json, "json", false, "print the sandbox's description as JSON instead of its id")
	f.StringVar(&o.onTimeout, "on-timeout", "kill", "what happens at the timeout: kill, or pause (saved to disk, to be resumed)")
	f.BoolVar(&o.autoResume, "auto-resume", false, "with --on-timeout pause: a request to the paused sandbox resumes it")
	o.egress.register(cmd)
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runCreate(ctx context.Context, g *globals, o *createOptions) error {
	if o.template != "" && o.image != "" {
		return fmt.Errorf("--template and --image: name one, not both")
	}
	if o.timeout < 0 {
		return fmt.Errorf("--timeout %v: must not be negative", o.timeout)
	}
	onTimeout := sdk.OnTimeout(o.onTimeout)
	if onTimeout == "" {
		onTimeout = sdk.OnTimeoutKill // callers that build options by hand
	}
	if onTimeout != sdk.OnTimeoutKill && onTimeout != sdk.OnTimeoutPause {
		return fmt.Errorf("--on-timeout %q: want kill or pause", o.onTimeout)
	}
	if o.autoResume && onTimeout != sdk.OnTimeoutPause {
		return fmt.Errorf("--auto-resume needs --on-timeout pause: only a paused sandbox is resumed")
	}
	env, err := parsePairs("--env", o.env)
	if err != nil {
		return err
	}
	md, err := parsePairs("--metadata", o.metadata)
	if err != nil {
		return err
	}
	opts := sdk.CreateOptions{
		Template: o.template, Image: o.image, Envs: env, Metadata: md,
		CPUs: o.cpus, MemoryMB: o.memoryMB, DiskMB: o.disk.mb, Timeout: o.timeout,
		Backend: g.backend, OnTimeout: onTimeout, AutoResume: o.autoResume,
	}
	if o.egress.set() {
		if opts.Network, opts.AllowInternetAccess, err = o.egress.policy(); err != nil {
			return err
		}
	}
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	sb, err := r.Create(ctx, opts)
	if err != nil {
		return r.control(err, "")
	}
	if !o.json {
		_, err := fmt.Fprintln(g.stdout, sb.ID())
		return err
	}
	// Create answers with little; the description has the rest.
	info, err := sb.GetInfo(ctx)
	if err != nil {
		return r.control(err, sb.ID())
	}
	return printJSON(g.stdout, toJSON(info))
}
