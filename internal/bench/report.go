package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Section is a part of the report: a heading and the table of its figures.
type Section string

// The report's sections, in the order it prints them.
const (
	SectionCreate     Section = "Create → first command"
	SectionCommand    Section = "Command round trip"
	SectionTransfer   Section = "Transfers"
	SectionConcurrent Section = "Concurrent creates"
	SectionMemory     Section = "Host memory per idle sandbox"
	SectionRaw        Section = "Raw runsc"
)

// Sections lists every section in report order.
var Sections = []Section{SectionCreate, SectionCommand, SectionTransfer, SectionConcurrent, SectionMemory, SectionRaw}

// Units of figures.
const (
	UnitMS  = "ms"
	UnitMiB = "MiB"
)

// Figure is one thing measured: its samples and what they say. A figure
// with no samples carries the reason in Note ("skipped: …").
type Figure struct {
	// Key names the figure in report.json, such as "create-cold".
	Key     string  `json:"key"`
	Name    string  `json:"name"`
	Section Section `json:"section"`
	Unit    string  `json:"unit"`
	// Runs is how many samples were asked for; Samples may hold fewer
	// where runs failed (Errors) or, for create, fell to the other of
	// cold and warm.
	Runs    int       `json:"runs"`
	Samples []float64 `json:"samples"`
	Summary Summary   `json:"summary"`
	// Bytes is what a transfer moved each run, for its throughput.
	Bytes int64 `json:"bytes,omitempty"`
	// Errors counts the runs that failed; Note says why, or why the
	// figure was not measured at all.
	Errors int    `json:"errors,omitempty"`
	Note   string `json:"note,omitempty"`
}

// Add records one sample.
func (f *Figure) Add(v float64) { f.Samples = append(f.Samples, v) }

// AddDuration records one sample of a figure in milliseconds.
func (f *Figure) AddDuration(d time.Duration) { f.Add(float64(d) / float64(time.Millisecond)) }

// Fail records a failed run, keeping the first error as the note.
func (f *Figure) Fail(err error) {
	f.Errors++
	if f.Note == "" {
		f.Note = "failed: " + err.Error()
	}
}

// Skip marks the figure as not measured, saying why.
func (f *Figure) Skip(why string) { f.Note = "skipped: " + why }

// Machine describes where the bench ran and what it measured.
type Machine struct {
	CPUs          int    `json:"cpus"`
	CPUModel      string `json:"cpu_model,omitempty"`
	MemoryMiB     int64  `json:"memory_mib,omitempty"`
	Kernel        string `json:"kernel,omitempty"`
	OS            string `json:"os"`
	Arch          string `json:"arch"`
	RunscVersion  string `json:"runsc_version,omitempty"`
	TupperVersion string `json:"tupper_version"`
	DaemonURL     string `json:"daemon_url"`
	// Local reports whether the daemon runs on this host, where its
	// sandboxes' memory can be read.
	Local bool `json:"local"`
}

// Report is everything one bench found.
type Report struct {
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	Runs     int           `json:"runs"`
	Quick    bool          `json:"quick"`
	Template string        `json:"template"`
	Machine  Machine       `json:"machine"`
	Figures  []*Figure     `json:"figures"`
}

// Figure returns the figure of key, or nil.
func (r *Report) Figure(key string) *Figure {
	for _, f := range r.Figures {
		if f.Key == key {
			return f
		}
	}
	return nil
}

// Summarize fills every figure's Summary from its samples.
func (r *Report) Summarize() {
	for _, f := range r.Figures {
		f.Summary = Summarize(f.Samples)
	}
}

// Files written into the report's directory.
const (
	MarkdownFile = "report.md"
	JSONFile     = "report.json"
	ChartFile    = "chart.png"
)

// Write summarizes r and writes report.md, report.json and chart.png into
// dir, making it if needed.
func (r *Report) Write(dir string) error {
	r.Summarize()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report directory: %w", err)
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, JSONFile), append(js, '\n'), 0o644); err != nil {
		return err
	}
	png, err := r.Chart()
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ChartFile), png, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, MarkdownFile), []byte(r.Markdown()), 0o644)
}

// rawRun and rawExec are the medians of the raw runsc figures that the
// tables compare against; 0 when not measured.
func (r *Report) rawMedians() (run, exec float64) {
	if f := r.Figure(KeyRawRun); f != nil {
		run = Summarize(f.Samples).Median
	}
	if f := r.Figure(KeyRawExec); f != nil {
		exec = Summarize(f.Samples).Median
	}
	return run, exec
}

// Markdown is the report as report.md holds it.
func (r *Report) Markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "# Tupper bench\n\n")
	fmt.Fprintf(&b, "Run at %s for %s; %d runs per figure%s; template %s.\n\n",
		r.Started.Format(time.RFC3339), r.Duration.Round(time.Second), r.Runs, map[bool]string{true: " (--quick)"}[r.Quick], r.Template)
	fmt.Fprintf(&b, "## Machine\n\n")
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	row := func(k, v string) {
		if v == "" {
			v = "unknown"
		}
		fmt.Fprintf(&b, "| %s | %s |\n", k, v)
	}
	row("CPUs", fmt.Sprintf("%d × %s", m.CPUs, m.CPUModel))
	row("Memory", fmt.Sprintf("%d MiB", m.MemoryMiB))
	row("Kernel", m.Kernel)
	row("OS/arch", m.OS+"/"+m.Arch)
	row("runsc", m.RunscVersion)
	row("Tupper", m.TupperVersion)
	row("Daemon", fmt.Sprintf("%s (%s)", m.DaemonURL, map[bool]string{true: "on this host", false: "remote"}[m.Local]))
	fmt.Fprintf(&b, "\n![medians with p95 whiskers](%s)\n", ChartFile)

	run, exec := r.rawMedians()
	for _, s := range Sections {
		fmt.Fprintf(&b, "\n## %s\n\n", s)
		switch s {
		case SectionConcurrent:
			b.WriteString("Each create's latency, all started at once.\n\n")
			b.WriteString("| figure | n | p50 | p95 | p99 | max | p95 × runsc run |\n|---|---|---|---|---|---|---|\n")
		case SectionMemory:
			b.WriteString("Proportional set size (PSS) of each sandbox's runsc processes on the host, idle, with the sandboxes of the largest concurrent round all running.\n\n")
			b.WriteString("| figure | n | min | median | p95 | max |\n|---|---|---|---|---|---|\n")
		case SectionTransfer:
			b.WriteString("| figure | n | min | median | p95 | max | MB/s at median | × runsc run |\n|---|---|---|---|---|---|---|---|\n")
		default:
			b.WriteString("| figure | n | min | median | p95 | max | × runsc run | × runsc exec |\n|---|---|---|---|---|---|---|---|\n")
		}
		for _, f := range r.Figures {
			if f.Section != s {
				continue
			}
			sum := Summarize(f.Samples)
			if sum.N == 0 {
				fmt.Fprintf(&b, "| %s | 0 | %s |\n", f.Name, f.Note)
				continue
			}
			v := func(x float64) string { return formatValue(x, f.Unit) }
			switch s {
			case SectionConcurrent:
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s |\n", f.Name, sum.N, v(sum.Median), v(sum.P95), v(sum.P99), v(sum.Max), ratio(sum.P95, run))
			case SectionMemory:
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", f.Name, sum.N, v(sum.Min), v(sum.Median), v(sum.P95), v(sum.Max))
			case SectionTransfer:
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", f.Name, sum.N, v(sum.Min), v(sum.Median), v(sum.P95), v(sum.Max), throughput(f.Bytes, sum.Median), ratio(sum.Median, run))
			default:
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", f.Name, sum.N, v(sum.Min), v(sum.Median), v(sum.P95), v(sum.Max), ratio(sum.Median, run), ratio(sum.Median, exec))
			}
			if f.Errors > 0 || f.Note != "" {
				fmt.Fprintf(&b, "\n%s: %d of %d runs failed; %s\n\n", f.Name, f.Errors, f.Runs, f.Note)
			}
		}
	}
	return b.String()
}

// formatValue prints a value of unit with the precision that matters.
func formatValue(v float64, unit string) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, unit)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}

// ratio is v ÷ base as "2.50×", or "—" when base was not measured.
func ratio(v, base float64) string {
	if base <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", v/base)
}

// throughput is n bytes in ms milliseconds as decimal MB/s.
func throughput(n int64, ms float64) string {
	if n <= 0 || ms <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f", float64(n)/1e6/(ms/1000))
}
