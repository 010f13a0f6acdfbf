//go:build !linux

package main

// isVMInit reports whether the agent runs as a microVM's init: never
// outside Linux.
func isVMInit() bool { return false }

// vmInitMain is never called outside Linux.
func vmInitMain() {}
