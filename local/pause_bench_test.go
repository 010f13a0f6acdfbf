package local_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// BenchmarkPauseResume pauses and resumes a sandbox of the test image that
// holds a Python process with 64 MiB of its own in memory, through the
// engine: each iteration is one pause (checkpoint to disk, sandbox
// stopped) and one resume until a command answers. It reports the host
// memory of the sandbox's processes running and paused (their resident
// sets, summed), and the size of the checkpoint on disk. Raw `runsc
// checkpoint` and `restore` of a bare container, from the same run, are
// backend/gvisor's BenchmarkRawRunscCheckpoint and BenchmarkRawRunscRestore.
func BenchmarkPauseResume(b *testing.B) {
	s := newStack(b, engine.Config{})
	ctx := context.Background()
	sb := s.create(b, sdk.CreateOptions{Timeout: time.Hour})
	if _, err := sb.Commands.Start(ctx, `python3 -c "import time; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(3600)"`, sdk.WithTimeout(0)); err != nil {
		b.Fatal(err)
	}
	eng := s.rt.Engine()
	time.Sleep(2 * time.Second) // the allocation is made
	running := hostRSS(sb.ID())
	var paused, ckpt int64
	var pause, resume time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := eng.Pause(ctx, sb.ID(), true); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		b.StopTimer()
		paused = hostRSS(sb.ID())
		ckpt = dirBytes(filepath.Join(s.cfg.Root, "engine", "paused", sb.ID()))
		b.StartTimer()
		t2 := time.Now()
		again, err := s.client.Connect(ctx, sb.ID())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := again.Commands.Run(ctx, "true"); err != nil {
			b.Fatal(err)
		}
		pause += t1.Sub(t0)
		resume += time.Since(t2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(pause.Milliseconds())/n, "pause-ms")
	b.ReportMetric(float64(resume.Milliseconds())/n, "resume-ms")
	b.ReportMetric(float64(running)/(1<<20), "running-host-MiB")
	b.ReportMetric(float64(paused)/(1<<20), "paused-host-MiB")
	b.ReportMetric(float64(ckpt)/(1<<20), "checkpoint-MiB")
}

// hostRSS sums the resident memory of the host processes of sandbox id.
func hostRSS(id string) int64 {
	var total int64
	for _, pid := range testutil.ProcessesOf(id) {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}

// dirBytes is what the files under dir take.
func dirBytes(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
