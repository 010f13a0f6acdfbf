package local_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
)

// BenchmarkFilesAsUser measures what acting with the user's credentials
// costs: each iteration does the same file operation as root (which the
// agent runs directly) and as user (on a thread holding user's ids), in the
// same sandbox, and the benchmark reports the ratio of their total times.
func BenchmarkFilesAsUser(b *testing.B) {
	s := newStack(b, engine.Config{})
	sb := s.create(b, sdk.CreateOptions{})
	ctx := context.Background()
	small := bytes.Repeat([]byte("x"), 4<<10)
	big := bytes.Repeat([]byte("0123456789abcdef"), (16<<20)/16)
	ops := []struct {
		name string
		do   func(user string) error
	}{
		{"write 4KiB", func(user string) error {
			_, err := sb.Files.Write(ctx, "/home/user/small-"+user, small, sdk.WithUser(user))
			return err
		}},
		{"stat", func(user string) error {
			_, err := sb.Files.Stat(ctx, "/home/user", sdk.WithUser(user))
			return err
		}},
		{"list", func(user string) error {
			_, err := sb.Files.List(ctx, "/etc", 1, sdk.WithUser(user))
			return err
		}},
		{"read 4KiB", func(user string) error {
			_, err := sb.Files.Read(ctx, "/home/user/small-"+user, sdk.WithUser(user))
			return err
		}},
		{"upload 16MiB", func(user string) error {
			_, err := sb.Files.Write(ctx, "/home/user/big-"+user, big, sdk.WithUser(user))
			return err
		}},
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			var asRoot, asUser time.Duration
			for b.Loop() {
				for _, u := range []string{"root", "user"} {
					start := time.Now()
					if err := op.do(u); err != nil {
						b.Fatalf("%s as %s: %v", op.name, u, err)
					}
					if u == "root" {
						asRoot += time.Since(start)
					} else {
						asUser += time.Since(start)
					}
				}
			}
			b.ReportMetric(float64(asUser)/float64(asRoot), "user/root")
			b.ReportMetric(float64(asUser.Microseconds())/float64(b.N), "µs-as-user/op")
			b.ReportMetric(float64(asRoot.Microseconds())/float64(b.N), "µs-as-root/op")
		})
	}
}
