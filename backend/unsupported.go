package backend

import "context"

// Unsupported is a backend on an operating system it cannot run on: each
// method fails with Err (of class errdefs.ErrNotSupported). A backend
// package's build for such systems embeds it, so that the package builds
// everywhere while its New fails there.
type Unsupported struct{ Err error }

// Start fails with u.Err.
func (u Unsupported) Start(context.Context, *Spec) (*Sandbox, error) { return nil, u.Err }

// State fails with u.Err.
func (u Unsupported) State(context.Context, string) (State, error) { return "", u.Err }

// Stop fails with u.Err.
func (u Unsupported) Stop(context.Context, string) error { return u.Err }

// List fails with u.Err.
func (u Unsupported) List(context.Context) ([]string, error) { return nil, u.Err }
