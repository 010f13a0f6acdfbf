package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lightbearco/tupper/sdk"
)

// densityRun creates n idle sandboxes through the daemon d in waves of
// wave concurrent creates, while a client lists the sandboxes every 200 ms;
// then runs a command in every one and kills them all. It returns the
// list latencies seen during the creates, and fails the test on any create
// that did not answer 201, any sandbox that does not answer its command,
// and any list that fails.
func densityRun(ctx context.Context, t testing.TB, d *serveDaemon, client *sdk.Client, n, wave int) (lists []time.Duration) {
	stopList := make(chan struct{})
	listed := make(chan []time.Duration, 1)
	go func() {
		var took []time.Duration
		defer func() { listed <- took }()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopList:
				return
			case <-tick.C:
			}
			start := time.Now()
			status, body, err := d.api(ctx, http.MethodGet, "/sandboxes", nil)
			if err != nil || status != http.StatusOK {
				t.Errorf("list during the creates: %d %s %v", status, body, err)
				continue
			}
			took = append(took, time.Since(start))
		}
	}()
	var (
		mu  sync.Mutex
		sbs []*sdk.Sandbox
	)
	for done := 0; done < n; done += wave {
		var wg sync.WaitGroup
		for range min(wave, n-done) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := client.Create(ctx, sdk.CreateOptions{Timeout: 30 * time.Minute})
				if err != nil {
					t.Errorf("create %d of %d: %v", len(sbs)+1, n, err)
					return
				}
				mu.Lock()
				sbs = append(sbs, sb)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			break
		}
	}
	close(stopList)
	lists = <-listed
	t.Logf("%d idle sandboxes running", len(sbs))
	for i, sb := range sbs {
		r, err := sb.Commands.Run(ctx, "echo alive "+strconv.Itoa(i))
		if err != nil || r.Stdout != fmt.Sprintf("alive %d\n", i) {
			t.Errorf("sandbox %d (%s) after all were created: %+v %v", i, sb.ID(), r, err)
		}
	}
	for _, sb := range sbs {
		if err := sb.Kill(ctx); err != nil {
			t.Errorf("kill %s: %v", sb.ID(), err)
		}
	}
	return lists
}

// TestDensity creates 100 idle base sandboxes through `tupper serve` with
// its default limits and admission, in waves of 10: every create is
// admitted (the host budget counts what sandboxes use, not their worst
// case, which admitted 25 here), every sandbox answers a command once all
// run, listing works throughout, and killing them all leaves nothing (the
// daemon's cleanup checks the host).
func TestDensity(t *testing.T) {
	if testing.Short() {
		t.Skip("boots 100 gVisor sandboxes")
	}
	d := startServeDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	lists := densityRun(ctx, t, d, goClient(t, d), 100, 10)
	if len(lists) == 0 {
		t.Fatal("no list answered during the creates")
	}
	slices.Sort(lists)
	t.Logf("list during the creates: %d answers, median %v, p95 %v, max %v",
		len(lists), lists[len(lists)/2], lists[len(lists)*95/100], lists[len(lists)-1])
	if ids := d.sandboxIDs(ctx, t); len(ids) != 0 {
		t.Errorf("sandboxes left after the kills: %v", ids)
	}
}

