package local_test

import (
	"context"
	"sync"
	"testing"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
)

// TestCreateBurstWaitsOutBusy checks that a burst of creates beyond the
// engine's turns and queue all succeed through the Go SDK in process: a
// create refused as busy is tried again after the wait the refusal names,
// as it is over HTTP, instead of failing while the host is merely busy.
func TestCreateBurstWaitsOutBusy(t *testing.T) {
	s := newStack(t, engine.Config{MaxCreating: 1, MaxQueued: 1})
	ctx := context.Background()
	const burst = 4 // one booting, one queued, two refused at first
	errs := make([]error, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			sb, err := s.client.Create(ctx, sdk.CreateOptions{})
			errs[i] = err
			if err == nil {
				t.Cleanup(func() { _ = sb.Kill(context.Background()) })
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("create %d of a burst of %d on 1 turn and 1 queued place: %v", i, burst, err)
		}
	}
}
