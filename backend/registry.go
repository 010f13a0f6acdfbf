package backend

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/lightbearco/tupper/errdefs"
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

// Opens makes a backend's Factory from its two halves: configFrom maps the
// registry's Config (root, logger, options, network) onto the backend's
// own config, and newBackend makes the backend from that.
func Opens[C any, B Backend](configFrom func(Config) (C, error), newBackend func(C) (B, error)) Factory {
	return func(c Config) (Backend, error) {
		cfg, err := configFrom(c)
		if err != nil {
			return nil, err
		}
		b, err := newBackend(cfg)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return b, nil
	}
}

// CheckOptions fails with errdefs.ErrInvalidArgument when opts holds a key
// that is not in known, so that a typo in a backend's option does not go
// unnoticed.
func CheckOptions(name string, opts map[string]string, known []string) error {
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		if !slices.Contains(known, k) {
			return fmt.Errorf("%s: unknown option %q (known: %s): %w", name, k, strings.Join(known, ", "), errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// BoolOption reads option key of opts as a boolean: false when it is not
// set, an errdefs.ErrInvalidArgument error when it is not one.
func BoolOption(name string, opts map[string]string, key string) (bool, error) {
	v, ok := opts[key]
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s: option %s=%q is not a boolean: %w", name, key, v, errdefs.ErrInvalidArgument)
	}
	return b, nil
}
