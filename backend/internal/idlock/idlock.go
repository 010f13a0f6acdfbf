// Package idlock serializes what backends do to one sandbox while letting
// calls for different sandboxes run at once.
package idlock

import "sync"

// Locks serializes the calls for one id and lets calls for different ids
// run at once.
type Locks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	sync.Mutex
	refs int
}

// lock locks id and returns the function that unlocks it.
func (l *Locks) Lock(id string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*idLock{}
	}
	e := l.m[id]
	if e == nil {
		e = &idLock{}
		l.m[id] = e
	}
	e.refs++
	l.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	}
}
