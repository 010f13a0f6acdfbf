package bench

import (
	"bytes"
	"encoding/json"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sampleReport is a report as a bench leaves it: figures measured, one
// failed in part, one skipped.
func sampleReport() *Report {
	fig := func(key, name string, s Section, unit string, samples ...float64) *Figure {
		return &Figure{Key: key, Name: name, Section: s, Unit: unit, Runs: len(samples), Samples: samples}
	}
	cold := fig(KeyCreateCold, "create to first command (cold)", SectionCreate, UnitMS, 600, 500, 700)
	warm := fig(KeyCreateWarm, "create to first command (warm)", SectionCreate, UnitMS)
	warm.Skip("no create came from a warm pool")
	cmd := fig(KeyCommand, "commands.run(true) (Go SDK)", SectionCommand, UnitMS, 25, 30, 20)
	cmd.Runs = 4
	cmd.Fail(os.ErrDeadlineExceeded)
	up := fig(KeyTransfer("upload", 100<<20, "go"), "upload 100 MiB (Go SDK)", SectionTransfer, UnitMS, 1000, 1000, 1000)
	up.Bytes = 100 << 20
	return &Report{
		Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Duration: time.Minute, Runs: 3, Template: "base",
		Machine: Machine{CPUs: 2, CPUModel: "Test CPU", MemoryMiB: 4096, Kernel: "6.1.0", OS: "linux", Arch: "amd64",
			RunscVersion: "runsc version test", TupperVersion: "devel", DaemonURL: "http://127.0.0.1:3000", Local: true},
		Figures: []*Figure{
			cold, warm, cmd, up,
			fig(KeyConcurrent(20), "20 concurrent creates", SectionConcurrent, UnitMS, 100, 200, 300, 400),
			fig(KeyMemory, "idle sandbox, 4 running", SectionMemory, UnitMiB, 19, 20, 21, 22),
			fig(KeyRawRun, "runsc run /bin/true", SectionRaw, UnitMS, 250, 250, 250),
			fig(KeyRawExec, "runsc exec /bin/true", SectionRaw, UnitMS, 20, 20, 20),
		},
	}
}

func TestReportWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	rep := sampleReport()
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}

	md, err := os.ReadFile(filepath.Join(dir, MarkdownFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Machine",
		"| CPUs | 2 × Test CPU |",
		"| Memory | 4096 MiB |",
		"| Kernel | 6.1.0 |",
		"| runsc | runsc version test |",
		"| Daemon | http://127.0.0.1:3000 (on this host) |",
		"![medians with p95 whiskers](chart.png)",
		// The median over raw runsc run's and exec's medians.
		"| create to first command (cold) | 3 | 500 ms | 600 ms | 700 ms | 700 ms | 2.40× | 30.00× |",
		"| create to first command (warm) | 0 | skipped: no create came from a warm pool |",
		"commands.run(true) (Go SDK): 1 of 4 runs failed",
		// 100 MiB in a second: 105 MB/s.
		"| upload 100 MiB (Go SDK) | 3 | 1000 ms | 1000 ms | 1000 ms | 1000 ms | 105 | 4.00× |",
		"| 20 concurrent creates | 4 | 250 ms | 400 ms | 400 ms | 400 ms | 1.60× |",
		"| idle sandbox, 4 running | 4 | 19.0 MiB | 20.5 MiB | 22.0 MiB | 22.0 MiB |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	for _, s := range Sections {
		if !strings.Contains(string(md), "\n## "+string(s)+"\n") {
			t.Errorf("report.md lacks section %q", s)
		}
	}

	data, err := os.ReadFile(filepath.Join(dir, JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	if d := cmp.Diff(rep, &back); d != "" {
		t.Errorf("report.json does not give back the report (-wrote +read):\n%s", d)
	}
	if got := back.Figure(KeyCreateCold).Summary; got.N != 3 || got.Median != 600 {
		t.Errorf("report.json's cold create summary = %+v, want the summary of its 3 samples", got)
	}

	pngData, err := os.ReadFile(filepath.Join(dir, ChartFile))
	if err != nil {
		t.Fatal(err)
	}
	checkChart(t, pngData, true)
}

// checkChart decodes a chart and checks that it has bars in the bar colour
// (or none, when nothing was measured) and text.
func checkChart(t *testing.T, data []byte, bars bool) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("chart.png: %v", err)
	}
	var barPixels, textPixels int
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			switch color.RGBAModel.Convert(img.At(x, y)) {
			case colBar:
				barPixels++
			case colText:
				textPixels++
			}
		}
	}
	if bars != (barPixels > 0) || textPixels == 0 {
		t.Errorf("chart %v: %d bar pixels, %d text pixels; want bars %v and some text", b, barPixels, textPixels, bars)
	}
}

func TestChartWithNothingMeasured(t *testing.T) {
	rep := &Report{Figures: []*Figure{{Key: KeyCommand, Name: "x", Section: SectionCommand, Unit: UnitMS, Note: "skipped: test"}}}
	data, err := rep.Chart()
	if err != nil {
		t.Fatal(err)
	}
	checkChart(t, data, false)
}
