package backend

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Factory makes a Backend from its configuration.
type Factory func(Config) (Backend, error)

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
)

// Register makes a backend available by name. Backend packages call it from
// init. It panics when name is empty, f is nil, or name is taken, as those
// are programming errors.
func Register(name string, f Factory) {
	if name == "" {
		panic("backend: Register with an empty name")
	}
	if f == nil {
		panic("backend: Register of " + name + " with a nil factory")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := factories[name]; dup {
		panic("backend: Register called twice for " + name)
	}
	factories[name] = f
}

// Names returns the names of the registered backends, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(factories))
	for n := range factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open makes the backend registered as name. An unknown name gets an error
// that lists the known ones.
func Open(name string, cfg Config) (Backend, error) {
	mu.RLock()
	f, ok := factories[name]
	mu.RUnlock()
	if !ok {
		known := Names()
		if len(known) == 0 {
			return nil, fmt.Errorf("backend %q: not registered, and no backend is linked into this program", name)
		}
		return nil, fmt.Errorf("backend %q: not registered; known backends: %s", name, strings.Join(known, ", "))
	}
	return f(cfg)
}

// unregisterForTest removes name and its check; tests of the registry use
// it.
func unregisterForTest(name string) {
	mu.Lock()
	delete(factories, name)
	mu.Unlock()
	checksMu.Lock()
	delete(checks, name)
	checksMu.Unlock()
}
