package local_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
)

// BenchmarkUpload64MiBDiskCap measures what a disk cap costs an upload: 64
// MiB into a sandbox with a tight cap (256 MiB: room for the file in the
// home, its copy in /tmp, and the temporary file of the one being
// replaced, with little to spare) and into one with the
// largest cap a create may ask for (100 GiB), which is what no cap costs.
// gVisor's overlay counts the pages of every write against its tmpfs's
// limit whether or not runsc got a size (without one the limit is MaxInt64),
// so the two differ only in the limit's value: a ratio near 1 says the
// check is free, a lower one that a nearly full disk is slower. The two
// sandboxes take turns, so load from elsewhere falls on both alike.
//
// It reports MB/s for each and the ratio capped/uncapped; a third figure
// is the capped sandbox's /tmp, which is in the same capped layer.
func BenchmarkUpload64MiBDiskCap(b *testing.B) {
	const size = 64 << 20
	s := newStack(b, engine.Config{})
	capped := s.create(b, sdk.CreateOptions{DiskMB: 256})
	uncapped := s.create(b, sdk.CreateOptions{DiskMB: engine.DefaultMaxDiskMB})
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	ctx := context.Background()
	upload := func(sb *sdk.Sandbox, path string) time.Duration {
		t0 := time.Now()
		if _, err := sb.Files.WriteStream(ctx, path, bytes.NewReader(data)); err != nil {
			b.Fatalf("upload to %s: %v", path, err)
		}
		return time.Since(t0)
	}
	var tCapped, tUncapped, tTmp time.Duration
	n := 0
	for b.Loop() {
		tCapped += upload(capped, "/home/user/big")
		tUncapped += upload(uncapped, "/home/user/big")
		tTmp += upload(capped, "/tmp/big")
		n++
	}
	mbps := func(d time.Duration) float64 { return float64(n) * size / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(tCapped), "MB/s-capped")
	b.ReportMetric(mbps(tUncapped), "MB/s-uncapped")
	b.ReportMetric(mbps(tTmp), "MB/s-capped-tmp")
	b.ReportMetric(tUncapped.Seconds()/tCapped.Seconds(), "capped/uncapped")
}
