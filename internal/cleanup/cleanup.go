// Package cleanup undoes the finished steps of a half-made thing (a
// sandbox, a network endpoint) when a later step fails: gVisor's
// cleanup.Make/Release in small. Push an undo function after each step;
// Release once all succeeded; Run in a deferred call otherwise.
//
// A Stack is not safe for concurrent use: it belongs to one create.
package cleanup

import "errors"

// Stack holds undo functions; its zero value is empty and ready.
type Stack struct {
	undo []func() error
}

// Add pushes f, to be run if the stack is not released.
func (s *Stack) Add(f func() error) { s.undo = append(s.undo, f) }

// Release forgets every undo function: the work succeeded.
func (s *Stack) Release() { s.undo = nil }

// Run calls the undo functions, last first, even when some fail, and
// returns their joined errors. The stack is empty afterwards.
func (s *Stack) Run() error {
	var errs []error
	for i := len(s.undo) - 1; i >= 0; i-- {
		if err := s.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	s.undo = nil
	return errors.Join(errs...)
}
