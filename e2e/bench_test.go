package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/bench"
	"github.com/lightbearco/tupper/internal/testutil"
)

// TestBenchQuick is the smoke run of `tupper bench`: against a real `tupper
// serve` with a warm pool of one, `tupper bench --quick --out DIR` must
// write a report that is complete — every section in report.md with the
// machine's description, a chart.png that decodes, and in report.json every
// figure with as many samples as runs asked for. The numbers themselves
// are not judged.
func TestBenchQuick(t *testing.T) {
	requireNode(t)
	npmCI(t, filepath.Join(testutil.ModuleRoot(), "e2e", "e2b"))
	d := startServeDaemon(t, "--warm", "base=1")
	// The pool's sandboxes are listed to no key, so the daemon's cleanup
	// cannot kill them: a start without the pool kills them, as it kills
	// every pool sandbox of a former run, before that cleanup runs.
	t.Cleanup(func() {
		d.stop(t)
		d.args = nil
		d.start(t)
	})
	c := newTupperCLI(t, d, d.Key)
	out := filepath.Join(t.TempDir(), "report")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, "bench", "--quick", "--out", out, "--image-root", d.imageRoot,
		"--e2b-js", filepath.Join(testutil.ModuleRoot(), "e2e", "e2b"))
	cmd.Env = c.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tupper bench --quick: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("tupper bench --quick:\n%s", stdout.String())
	if !strings.Contains(stdout.String(), filepath.Join(out, "report.md")) {
		t.Errorf("stdout does not say where the report is:\n%s", stdout.String())
	}

	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Machine", "| CPUs |", "| Memory |", "| Kernel |", "| runsc |", "| Tupper |", "| Daemon | " + d.URL, "](chart.png)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	for _, s := range bench.Sections {
		if !strings.Contains(string(md), "\n## "+string(s)+"\n") {
			t.Errorf("report.md lacks the section %q:\n%s", s, md)
		}
	}

	f, err := os.Open(filepath.Join(out, "chart.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart.png: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 200 {
		t.Errorf("chart.png is %v: too small to show the figures", b)
	}

	js, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	const runs = 3 // --quick
	want := map[string]int{
		bench.KeyCommand: runs, bench.KeyCommandJS: runs,
		bench.KeyConcurrent(3): 3, bench.KeyConcurrent(5): 5,
		// The sandboxes of the largest round, on this host's runsc.
		bench.KeyMemory: 5,
		// runsc and root are here (startServeDaemon skips otherwise).
		bench.KeyRawRun: runs, bench.KeyRawExec: runs,
	}
	for _, size := range []int64{1 << 20, 100 << 20} {
		for _, op := range []string{"upload", "download"} {
			for _, client := range []string{"go", "js"} {
				want[bench.KeyTransfer(op, size, client)] = runs
			}
		}
	}
	for key, n := range want {
		fig := rep.Figure(key)
		switch {
		case fig == nil:
			t.Errorf("report.json has no figure %s", key)
		case len(fig.Samples) != n || fig.Summary.N != n:
			t.Errorf("figure %s: %d samples (summary of %d), want %d; note %q", key, len(fig.Samples), fig.Summary.N, n, fig.Note)
		}
	}
	// The daemon was listed throughout the largest round, without a failure.
	if list := rep.Figure(bench.KeyListLoad); list == nil || len(list.Samples) == 0 || list.Errors > 0 {
		t.Errorf("report.json's list-during-creates figure = %+v, want samples and no failure", list)
	}
	// Each create is cold or warm, as its answer said.
	cold, warm := rep.Figure(bench.KeyCreateCold), rep.Figure(bench.KeyCreateWarm)
	if cold == nil || warm == nil {
		t.Fatalf("report.json lacks the create figures")
	}
	if n := len(cold.Samples) + len(warm.Samples); n != runs {
		t.Errorf("create to first command: %d cold + %d warm samples, want %d in all (notes %q, %q)", len(cold.Samples), len(warm.Samples), runs, cold.Note, warm.Note)
	}
	if rep.Machine.CPUs < 1 || rep.Machine.DaemonURL != d.URL || !rep.Machine.Local || rep.Machine.TupperVersion == "" {
		t.Errorf("report.json machine = %+v", rep.Machine)
	}
}
