package gvisor

import "errors"

// cleanupStack undoes the finished steps of a half-made sandbox, in
// reverse, unless released: gVisor's cleanup.Make/Release in small.
type cleanupStack struct {
	undo []func() error
}

// add pushes f, to be run if the stack is not released.
func (c *cleanupStack) add(f func() error) { c.undo = append(c.undo, f) }

// release forgets every undo function: the work succeeded.
func (c *cleanupStack) release() { c.undo = nil }

// run calls the undo functions, last first, and returns their joined errors.
func (c *cleanupStack) run() error {
	var errs []error
	for i := len(c.undo) - 1; i >= 0; i-- {
		if err := c.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	c.undo = nil
	return errors.Join(errs...)
}
