package backendtest

import (
	"context"
	"testing"

	"github.com/lightbearco/tupper/backend"
)

// StopOnCleanup stops every sandbox b still holds when the test ends, and
// fails the test for each that does not stop: a backend's tests use it so
// that nothing outlives them.
func StopOnCleanup(tb testing.TB, b backend.Backend) {
	tb.Helper()
	tb.Cleanup(func() {
		ctx := context.Background()
		ids, err := b.List(ctx)
		if err != nil {
			tb.Errorf("cleanup: List: %v", err)
		}
		for _, id := range ids {
			if err := b.Stop(ctx, id); err != nil {
				tb.Errorf("cleanup: Stop(%s): %v", id, err)
			}
		}
	})
}
