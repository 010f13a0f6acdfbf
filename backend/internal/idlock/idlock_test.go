package idlock

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOneIDAtATime: calls for one id never overlap, calls for two ids do,
// and the table forgets an id once nobody holds or waits for it.
func TestOneIDAtATime(t *testing.T) {
	var l Locks
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := l.Lock("a")
			n := inside.Add(1)
			if n > most.Load() {
				most.Store(n)
			}
			time.Sleep(time.Millisecond)
			inside.Add(-1)
			unlock()
		}()
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("%d calls for one id ran at once", most.Load())
	}
	unlockA := l.Lock("a")
	done := make(chan struct{})
	go func() { l.Lock("b")(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a call for b waited for a's lock")
	}
	unlockA()
	if len(l.m) != 0 {
		t.Errorf("the table still holds %d ids", len(l.m))
	}
}
