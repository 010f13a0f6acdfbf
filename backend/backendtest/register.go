package backendtest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

// registered holds what each name that Register registered hands out now.
var registered = struct {
	sync.Mutex
	fakes map[string]*Fake // nil: the backend does not work here
	names map[string]bool
}{fakes: map[string]*Fake{}, names: map[string]bool{}}

// Register makes backend.Open(name, …) hand out f until t ends, so that
// code which opens backends by name (the engine, for the sandboxes that
// ask for a backend) runs against a Fake. Its self-check says it works.
// A nil f stands for a backend that does not work on this host: its
// self-check fails, as `tupper doctor` would show, and so does its Open.
//
// The registry forgets nothing, so name stays registered for the life of
// the test binary; once t ends, it is a backend that does not work.
func Register(t testing.TB, name string, f *Fake) {
	t.Helper()
	registered.Lock()
	first := !registered.names[name]
	registered.names[name] = true
	registered.fakes[name] = f
	registered.Unlock()
	if first {
		backend.Register(name, func(c backend.Config) (backend.Backend, error) { return openRegistered(name, c) })
		backend.RegisterCheck(name, func(context.Context) []backend.Finding { return checkRegistered(name) })
	}
	t.Cleanup(func() {
		registered.Lock()
		if registered.fakes[name] == f {
			registered.fakes[name] = nil
		}
		registered.Unlock()
	})
}

func openRegistered(name string, c backend.Config) (backend.Backend, error) {
	registered.Lock()
	f := registered.fakes[name]
	registered.Unlock()
	if f == nil {
		return nil, fmt.Errorf("%s: /dev/%s is missing: %w", name, name, errdefs.ErrUnavailable)
	}
	f.mu.Lock()
	f.opened = append(f.opened, c)
	f.mu.Unlock()
	return f, nil
}

func checkRegistered(name string) []backend.Finding {
	registered.Lock()
	works := registered.fakes[name] != nil
	registered.Unlock()
	if works {
		return []backend.Finding{{What: "/dev/" + name, OK: true, Detail: "present"}}
	}
	return []backend.Finding{{What: "/dev/" + name, Detail: "missing", Fix: "load the " + name + " module"}}
}
