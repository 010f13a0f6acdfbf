package local_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// The benchmarks below measure Tupper end to end (SDK → agent in a gVisor
// sandbox) beside raw runsc doing the nearest thing, in the same run:
//
//	create → first command   vs  runsc run /bin/true
//	command round trip       vs  runsc exec /bin/true
//	100 MiB up / download    vs  runsc exec cat, stdin / stdout
//
// `make bench` runs them; BENCHMARKS.md has the figures.

const benchFileSize = 100 << 20

func BenchmarkCreateToFirstCommand(b *testing.B) {
	benchCreate(b, newStack(b, engine.Config{}))
}

// BenchmarkCreateToFirstCommandNoEgress is the same with egress off
// (`tupper serve --egress off`): the difference is what the egress layer
// (its firewall chains) costs a create.
func BenchmarkCreateToFirstCommandNoEgress(b *testing.B) {
	benchCreate(b, newStackNet(b, engine.Config{}, backend.NetworkConfig{NoEgress: true}))
}

// BenchmarkCreateToFirstCommandRunc and BenchmarkCommandRoundTripRunc are
// the same on the runc backend, for the README's table of backends.
func BenchmarkCreateToFirstCommandRunc(b *testing.B) {
	benchCreate(b, newStackOn(b, "runc", engine.Config{}, backend.NetworkConfig{}))
}

func BenchmarkCommandRoundTripRunc(b *testing.B) {
	benchRoundTrip(b, newStackOn(b, "runc", engine.Config{}, backend.NetworkConfig{}))
}

func benchCreate(b *testing.B, s *stack) {
	ctx := context.Background()
	for b.Loop() {
		sb, err := s.client.Create(ctx, sdk.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Commands.Run(ctx, "true"); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := sb.Kill(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func BenchmarkCommandRoundTrip(b *testing.B) {
	benchRoundTrip(b, newStack(b, engine.Config{}))
}

func benchRoundTrip(b *testing.B, s *stack) {
	sb := s.create(b, sdk.CreateOptions{})
	ctx := context.Background()
	for b.Loop() {
		if _, err := sb.Commands.Run(ctx, "true"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUpload100MiB(b *testing.B) { benchUpload(b, "/home/user/big") }

// BenchmarkUpload100MiBToTmpfs writes where the raw baseline writes, to a
// tmpfs, so that the ratio shows the transport's cost and not the disk's.
func BenchmarkUpload100MiBToTmpfs(b *testing.B) { benchUpload(b, "/dev/shm/big") }

// benchUpload streams 100 MiB to path in a fresh sandbox, again and again.
func benchUpload(b *testing.B, path string) {
	s := newStack(b, engine.Config{})
	sb := s.create(b, sdk.CreateOptions{})
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), benchFileSize/16)
	b.SetBytes(benchFileSize)
	for b.Loop() {
		if _, err := sb.Files.WriteStream(ctx, path, bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDownload100MiB(b *testing.B) {
	s := newStack(b, engine.Config{})
	sb := s.create(b, sdk.CreateOptions{})
	ctx := context.Background()
	run(b, sb, fmt.Sprintf("head -c %d /dev/zero > /home/user/big", benchFileSize))
	b.SetBytes(benchFileSize)
	for b.Loop() {
		r, err := sb.Files.ReadStream(ctx, "/home/user/big")
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, r)
		r.Close()
		if err != nil || n != benchFileSize {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}
}

func rawContainer(b *testing.B) (*testutil.RawRunsc, string) {
	raw := testutil.NewRawRunsc(b, testutil.TestRootFS(b))
	id := fmt.Sprintf("raw-%d", time.Now().UnixNano())
	raw.Run(nil, nil, "run", "--detach", "--bundle", raw.Bundle("/bin/sleep", "3600"), id)
	b.Cleanup(func() { raw.Run(nil, nil, "delete", "--force", id) })
	return raw, id
}

func BenchmarkRawRunscRun(b *testing.B) {
	raw := testutil.NewRawRunsc(b, testutil.TestRootFS(b))
	bundle := raw.Bundle("/bin/true")
	for i := 0; b.Loop(); i++ {
		raw.Run(nil, nil, "run", "--bundle", bundle, fmt.Sprintf("raw-run-%d", i))
	}
}

func BenchmarkRawRunscExec(b *testing.B) {
	raw, id := rawContainer(b)
	for b.Loop() {
		raw.Run(nil, nil, "exec", id, "/bin/true")
	}
}

func BenchmarkRawRunscExecUpload100MiB(b *testing.B) {
	raw, id := rawContainer(b)
	data := bytes.Repeat([]byte("0123456789abcdef"), benchFileSize/16)
	b.SetBytes(benchFileSize)
	for b.Loop() {
		raw.Run(bytes.NewReader(data), nil, "exec", id, "/bin/sh", "-c", "cat > /tmp/big")
	}
}

func BenchmarkRawRunscExecDownload100MiB(b *testing.B) {
	raw, id := rawContainer(b)
	raw.Run(nil, nil, "exec", id, "/bin/sh", "-c", fmt.Sprintf("head -c %d /dev/zero > /tmp/big", benchFileSize))
	b.SetBytes(benchFileSize)
	for b.Loop() {
		raw.Run(nil, io.Discard, "exec", id, "/bin/cat", "/tmp/big")
	}
}

// BenchmarkRawRunscExecBash is the baseline for BenchmarkCommandRoundTrip
// doing the same work: the SDK runs every command as `bash -l -c`, as E2B's do.
func BenchmarkRawRunscExecBash(b *testing.B) {
	raw, id := rawContainer(b)
	for b.Loop() {
		raw.Run(nil, nil, "exec", id, "/bin/bash", "-l", "-c", "true")
	}
}
