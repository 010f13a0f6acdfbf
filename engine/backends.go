package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

// The engine runs each sandbox on the backend its record names: the
// default one (Config.Backend), which the caller opened, or another
// registered backend, which the engine opens from the registry the first
// time a create asks for it or a record at start names it, and keeps
// until Close. Every operation on a sandbox goes to its own backend.

// openedBackend is a backend other than the default, opened once; done is
// closed when the opening has finished, well or not.
type openedBackend struct {
	done chan struct{}
	be   backend.Backend
	err  error
}

// backendNamed returns the backend registered as name, opening it the
// first time; empty names the default. An unknown name fails with
// errdefs.ErrInvalidArgument and a list of the known ones; a backend that
// does not work on this host (its self-check, as `tupper doctor` prints
// it, fails) or fails to open, with errdefs.ErrUnavailable. A failed open
// is tried again at the next call: the operator may fix the host
// meanwhile.
func (e *Engine) backendNamed(ctx context.Context, name string) (backend.Backend, error) {
	if name == "" || name == e.cfg.BackendName {
		return e.cfg.Backend, nil
	}
	if e.cfg.BackendConfig == nil {
		return nil, fmt.Errorf("backend %q: this engine runs only %q: %w", name, e.cfg.BackendName, errdefs.ErrInvalidArgument)
	}
	if !slices.Contains(backend.Names(), name) {
		return nil, fmt.Errorf("backend %q is not built into this tupper; known backends: %s: %w", name, strings.Join(e.knownBackends(), ", "), errdefs.ErrInvalidArgument)
	}
	e.bmu.Lock()
	if e.bclosed {
		e.bmu.Unlock()
		return nil, fmt.Errorf("backend %q: engine is closed: %w", name, errdefs.ErrUnavailable)
	}
	o, ok := e.backends[name]
	if ok {
		e.bmu.Unlock()
		select {
		case <-o.done:
			return o.be, o.err
		case <-ctx.Done():
			return nil, fmt.Errorf("backend %q: %w", name, context.Cause(ctx))
		}
	}
	// Opened outside the lock, once: a create on another backend must not
	// wait behind it, and two creates must not open the same one twice
	// (both would claim its state directory).
	o = &openedBackend{done: make(chan struct{})}
	e.backends[name] = o
	e.bmu.Unlock()
	o.be, o.err = e.openBackend(ctx, name)
	e.bmu.Lock()
	closed := e.bclosed
	if o.err != nil || closed {
		delete(e.backends, name)
	}
	e.bmu.Unlock()
	if o.err == nil && closed {
		closeBackend(o.be)
		o.be, o.err = nil, fmt.Errorf("backend %q: engine is closed: %w", name, errdefs.ErrUnavailable)
	}
	close(o.done)
	if o.err == nil {
		e.log.Info("opened backend", "backend", name)
	}
	return o.be, o.err
}

// openBackend opens the backend registered as name, once its self-check
// says it works here. Others may be waiting for the outcome: the caller
// going away does not cut the check short.
func (e *Engine) openBackend(ctx context.Context, name string) (backend.Backend, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for _, r := range backend.CheckAll(ctx) {
		if r.Backend != name || !r.Checked || r.Works {
			continue
		}
		var failed []string
		for _, f := range r.Findings {
			if f.OK || f.Optional {
				continue
			}
			s := f.What
			if f.Detail != "" {
				s += ": " + f.Detail
			}
			if f.Fix != "" {
				s += " (fix: " + f.Fix + ")"
			}
			failed = append(failed, s)
		}
		return nil, fmt.Errorf("backend %q does not work on this host: %s; `tupper doctor` says more: %w", name, strings.Join(failed, "; "), errdefs.ErrUnavailable)
	}
	be, err := backend.Open(name, e.cfg.BackendConfig(name))
	if err != nil {
		// The backend's own class (a bad option is an invalid argument
		// of the backend's) is not the caller's: the host lacks it.
		return nil, fmt.Errorf("backend %q cannot be opened on this host: %v; see `tupper doctor`: %w", name, err, errdefs.ErrUnavailable)
	}
	return be, nil
}

// knownBackends names the backends a create may ask for, sorted.
func (e *Engine) knownBackends() []string {
	names := backend.Names()
	if !slices.Contains(names, e.cfg.BackendName) {
		names = append(names, e.cfg.BackendName)
		slices.Sort(names)
	}
	return names
}

// openedBackends returns the backends in use by name, the default
// included.
func (e *Engine) openedBackends() map[string]backend.Backend {
	out := map[string]backend.Backend{e.cfg.BackendName: e.cfg.Backend}
	e.bmu.Lock()
	defer e.bmu.Unlock()
	for name, o := range e.backends {
		select {
		case <-o.done:
			if o.err == nil {
				out[name] = o.be
			}
		default:
		}
	}
	return out
}

// closeBackends closes the backends the engine opened; the default is the
// caller's. Their sandboxes keep running, as Close promises.
func (e *Engine) closeBackends() error {
	e.bmu.Lock()
	e.bclosed = true
	opened := e.backends
	e.backends = nil
	e.bmu.Unlock()
	var errs []error
	for _, o := range opened {
		<-o.done
		if o.err == nil {
			errs = append(errs, closeBackend(o.be))
		}
	}
	return errors.Join(errs...)
}

// closeBackend closes b when it holds services of its own (the gVisor
// backend's resolver and egress proxy).
func closeBackend(b backend.Backend) error {
	if c, ok := b.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
