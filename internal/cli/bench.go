package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/backend/gvisor"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/bench"
	"github.com/lightbearco/tupper/internal/progress"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/sdk"
)

type benchOptions struct {
	api        apiOptions
	runs       int
	quick      bool
	out        string
	template   string
	concurrent []int
	// imageRoot is the daemon's image store, where the raw runsc figures
	// find a root filesystem.
	imageRoot string
	// e2bJS is where to look for node_modules/e2b.
	e2bJS string
	// transport carries the bench's requests; tests inject one. nil
	// means http.DefaultTransport.
	transport http.RoundTripper
}

// The runs of --quick: enough to check that every figure is produced.
const (
	quickRuns = 3
	benchRuns = 20
)

var (
	defaultConcurrent = []int{20, 50}
	quickConcurrent   = []int{3, 5}
	transferSizes     = []int64{1 << 20, 100 << 20}
)

func newBenchCmd(g *globals) *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench [--runs N | --quick] [--out DIR]",
		Short: "Measure a running `tupper serve` and write a report with the machine's description",
		Long: `bench measures a running ` + "`tupper serve`" + ` as a user meets it, each figure over
--runs runs (min, median, p95 and max): create to first command (cold, and warm
when the daemon has a warm pool for the template), the command round trip, 1 MiB
and 100 MiB uploads and downloads through the Go SDK and, where node and the e2b
package are found, the JS SDK, rounds of 20 and 50 concurrent creates (p50, p95,
p99), and the host memory of each idle sandbox of the largest round when the
daemon runs on this host. Beside them it measures raw ` + "`runsc run /bin/true`" + ` and
` + "`runsc exec /bin/true`" + ` when runsc is here (as root), on the root filesystem of
the template's image in the daemon's image store, else on the host's static
busybox.

It writes report.md (the machine, a table per figure with ratios to the raw
runsc figures), chart.png and report.json (every sample) into --out.`,
		Example: `  tupper bench --quick
  tupper bench --runs 50 --out /tmp/bench`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.quick {
				if !cmd.Flags().Changed("runs") {
					o.runs = quickRuns
				}
				if !cmd.Flags().Changed("concurrent") {
					o.concurrent = quickConcurrent
				}
			}
			return runBench(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.runs, "runs", benchRuns, "runs of each figure")
	f.BoolVar(&o.quick, "quick", false, fmt.Sprintf("a quick look: %d runs, %v concurrent creates", quickRuns, quickConcurrent))
	f.StringVar(&o.out, "out", "", "report directory (default ./tupper-bench-TIME)")
	f.StringVar(&o.template, "template", "", "template of the sandboxes (default: the daemon's, base)")
	f.IntSliceVar(&o.concurrent, "concurrent", defaultConcurrent, "sizes of the rounds of concurrent creates")
	f.StringVar(&o.imageRoot, "image-root", "", "the daemon's image store, for the raw runsc figures (default <root>/images)")
	f.StringVar(&o.e2bJS, "e2b-js", "", "directory with node_modules/e2b for the JS SDK figures (default: looked for from here up, and in e2e/e2b)")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runBench(ctx context.Context, g *globals, o *benchOptions) error {
	if o.runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", o.runs)
	}
	out := o.out
	if out == "" {
		out = "tupper-bench-" + time.Now().Format("20060102-150405")
	}
	cfg := o.api.config()
	warm := &bench.WarmTracker{Base: o.transport}
	cfg.HTTPClient = &http.Client{Transport: warm}
	t, err := sdk.NewHTTPTransport(cfg)
	if err != nil {
		return fmt.Errorf("--api-url: %w", err)
	}
	r := &remote{Client: &sdk.Client{Transport: t}, url: t.APIURL(), hasKey: cfg.APIKey != ""}
	// Ask once before anything is measured: an unreachable daemon or a
	// wrong key is said plainly.
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, _, err = r.List(lctx, sdk.ListOptions{})
	cancel()
	if err != nil {
		return r.control(err, "")
	}

	isLocal := loopbackURL(t.APIURL())
	bc := bench.Config{
		Client: r.Client, Warm: warm, Template: o.template, Runs: o.runs, Concurrency: o.concurrent,
		Sizes: transferSizes, Local: isLocal,
		Progress: &bench.Progress{Printer: progress.New(g.stderr, progress.FormatFor(g.stderr, false))},
	}
	runsc, _ := gvisor.FindRunsc()
	scratch, err := os.MkdirTemp("", "tupper-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	bc.Raw, bc.RawSkip = o.rawRunsc(ctx, g, runsc, scratch)

	dataURL := cfg.SandboxURL
	if dataURL == "" {
		dataURL = t.APIURL()
	}
	starts := []string{"."}
	if o.e2bJS != "" {
		starts = []string{o.e2bJS}
	} else if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	if js, err := bench.FindJSSDK(starts...); err != nil {
		bc.JSSkip = err.Error()
	} else {
		js.Env = append(withoutE2BEnv(os.Environ()), "E2B_API_URL="+t.APIURL(), "E2B_SANDBOX_URL="+dataURL, "E2B_API_KEY="+cfg.APIKey)
		bc.JS = js
	}

	rep, err := bench.Run(ctx, bc)
	if err != nil {
		return r.control(err, "")
	}
	rep.Quick = o.quick
	rep.Machine = bench.DescribeHost(ctx, runsc)
	rep.Machine.TupperVersion = version()
	rep.Machine.DaemonURL = t.APIURL()
	rep.Machine.Local = isLocal
	if err := rep.Write(out); err != nil {
		return err
	}
	printBench(g, rep)
	fmt.Fprintf(g.stdout, "\nreport: %s\n", filepath.Join(out, bench.MarkdownFile))
	return nil
}

// rawRunsc is how the raw runsc figures are measured here, or why not:
// runsc and root are needed, and a root filesystem with /bin/true and
// /bin/sleep: the template's image in the daemon's store, else one made
// under scratch of the host's static busybox.
func (o *benchOptions) rawRunsc(ctx context.Context, g *globals, runsc, scratch string) (*bench.RawRunsc, string) {
	switch {
	case runsc == "":
		return nil, "no runsc on this host"
	case os.Geteuid() != 0:
		return nil, "runsc needs root: run tupper bench as root"
	}
	if rootfs := o.imageRootFS(ctx, g); rootfs != "" {
		return &bench.RawRunsc{Runsc: runsc, RootFS: rootfs}, ""
	}
	rootfs, err := bench.BusyboxRootFS(scratch)
	if err != nil {
		return nil, err.Error()
	}
	return &bench.RawRunsc{Runsc: runsc, RootFS: rootfs}, ""
}

// imageRootFS is the unpacked root filesystem of the bench's template in
// the daemon's image store, when it is there with /bin/true and
// /bin/sleep; else "". It unpacks nothing and makes no store where there
// is none.
func (o *benchOptions) imageRootFS(ctx context.Context, g *globals) string {
	root := o.imageRoot
	if root == "" {
		state := g.root
		if state == "" {
			state = os.Getenv("TUPPER_ROOT")
		}
		if state == "" {
			state = local.DefaultRoot
		}
		root = filepath.Join(state, "images")
	}
	if _, err := os.Stat(filepath.Join(root, "unpacked")); err != nil {
		return ""
	}
	store, err := image.Open(image.Config{Root: root})
	if err != nil {
		return ""
	}
	defer store.Close()
	name := o.template
	if name == "" {
		name = "base"
	}
	img, err := store.Lookup(ctx, name)
	if err != nil {
		return ""
	}
	for _, p := range []string{"bin/true", "bin/sleep"} {
		if _, err := os.Stat(filepath.Join(img.RootFS, p)); err != nil {
			return ""
		}
	}
	return img.RootFS
}

// printBench prints each figure's summary as a table.
func printBench(g *globals, rep *bench.Report) {
	tw := tabwriter.NewWriter(g.stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tN\tMIN\tMEDIAN\tP95\tMAX\tUNIT")
	for _, f := range rep.Figures {
		s := f.Summary
		if s.N == 0 {
			fmt.Fprintf(tw, "%s\t0\t%s\n", f.Name, f.Note)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%s\n", f.Name, s.N, s.Min, s.Median, s.P95, s.Max, f.Unit)
	}
	tw.Flush()
}

// loopbackURL reports whether u names this host by a loopback address, so
// that the daemon's sandboxes are processes here.
func loopbackURL(u string) bool {
	parsed, err := url.Parse(u)
	if err != nil {
		return false
	}
	host := parsed.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withoutE2BEnv is env without the E2B SDK's settings, which the bench
// sets itself.
func withoutE2BEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "E2B_") {
			out = append(out, kv)
		}
	}
	return out
}
