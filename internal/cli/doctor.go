package cli

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/local"
)

type doctorOptions struct {
	json bool
	// checks runs the backends' self-checks; tests replace it.
	checks func(context.Context) []backend.Report
}

// doctorReport is what `tupper doctor --json` prints.
type doctorReport struct {
	OS       string            `json:"os"`
	Arch     string            `json:"arch"`
	Default  string            `json:"default_backend"`
	Backends []backend.Report  `json:"backends"`
	Host     []backend.Finding `json:"host"`
}

func newDoctorCmd(g *globals) *cobra.Command {
	o := &doctorOptions{checks: backend.CheckAll}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check which sandbox backends work on this host, and what to do where one does not",
		Long: "doctor runs the self-check of every backend built into tupper and a few checks of the host\n" +
			"(image builds, the state directory). It exits 1 when the backend tupper would use\n" +
			"(--backend, else the host's default) does not work here.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDoctor(cmd.Context(), g, o) },
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON")
	return cmd
}

func runDoctor(ctx context.Context, g *globals, o *doctorOptions) error {
	rep := doctorReport{OS: runtime.GOOS, Arch: runtime.GOARCH, Default: g.backend, Backends: o.checks(ctx), Host: hostFindings(g)}
	rep.Backends = append(rep.Backends, elsewhere(rep.Backends)...)
	if rep.Default == "" {
		rep.Default = local.DefaultBackend
	}
	var chosen *backend.Report
	for i := range rep.Backends {
		if rep.Backends[i].Backend == rep.Default {
			chosen = &rep.Backends[i]
		}
	}
	if o.json {
		if err := printJSON(g.stdout, rep); err != nil {
			return err
		}
	} else {
		printDoctor(g, rep)
	}
	switch {
	case chosen == nil:
		fmt.Fprintf(g.stderr, "tupper doctor: backend %q is not built into this tupper (built in: %s)\n", rep.Default, strings.Join(backend.Names(), ", "))
		return &exitError{code: 1}
	case !chosen.Works:
		fmt.Fprintf(g.stderr, "tupper doctor: backend %s does not work on this host: see what failed and how to fix it above\n", rep.Default)
		return &exitError{code: 1}
	}
	return nil
}

func printDoctor(g *globals, rep doctorReport) {
	w := g.stdout
	fmt.Fprintf(w, "host: %s/%s; default backend: %s\n", rep.OS, rep.Arch, rep.Default)
	for _, b := range rep.Backends {
		state := "works"
		switch {
		case !b.Checked:
			state = "not checked (it has no self-check)"
		case !b.Works:
			state = "does not work here"
		}
		fmt.Fprintf(w, "\nbackend %s: %s\n", b.Backend, state)
		printFindings(g, b.Findings)
	}
	fmt.Fprintf(w, "\nhost\n")
	printFindings(g, rep.Host)
}

func printFindings(g *globals, fs []backend.Finding) {
	for _, f := range fs {
		mark := "ok  "
		switch {
		case !f.OK && f.Optional:
			mark = "warn"
		case !f.OK:
			mark = "FAIL"
		}
		fmt.Fprintf(g.stdout, "  %s %-16s %s\n", mark, f.What, f.Detail)
		if !f.OK && f.Fix != "" {
			fmt.Fprintf(g.stdout, "       %-16s fix: %s\n", "", f.Fix)
		}
	}
}

// hostFindings are the checks that belong to no backend: what builds
// images and where the state lives.
func hostFindings(g *globals) []backend.Finding {
	var out []backend.Finding
	mm := backend.Finding{What: "mmdebstrap", Optional: true}
	if p, err := exec.LookPath("mmdebstrap"); err == nil {
		mm.OK, mm.Detail = true, p
	} else {
		mm.Detail = "not installed: `tupper image build` cannot build Debian images"
		mm.Fix = "apt-get install mmdebstrap (scripts/setup.sh does)"
	}
	out = append(out, mm)
	root := g.root
	if root == "" {
		root = os.Getenv("TUPPER_ROOT")
	}
	if root == "" {
		root = local.DefaultRoot
	}
	st := backend.Finding{What: "state directory", Optional: true, Detail: root}
	if fi, err := os.Stat(root); err == nil && fi.IsDir() {
		st.OK = true
	} else {
		st.Detail += ": not there yet (the first tupper serve makes it)"
	}
	return append(out, st)
}

// elsewhere reports the backends built for other operating systems
// (local.Elsewhere) that have no report of their own here: they do not
// work on this host, and say where they do.
func elsewhere(have []backend.Report) []backend.Report {
	var out []backend.Report
	for _, name := range slices.Sorted(maps.Keys(local.Elsewhere)) {
		if slices.ContainsFunc(have, func(r backend.Report) bool { return r.Backend == name }) {
			continue
		}
		out = append(out, backend.Report{Backend: name, Checked: true, Findings: []backend.Finding{{
			What:   "operating system",
			Detail: fmt.Sprintf("runs on %s; not built into tupper for %s", local.Elsewhere[name], runtime.GOOS),
			Fix:    "run tupper there, or point this tupper at a daemon there (TUPPER_API_URL)",
		}}})
	}
	return out
}
