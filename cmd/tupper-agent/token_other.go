//go:build !linux

package main

// hideToken does nothing outside Linux, where the agent never runs as a
// sandbox's PID 1.
func hideToken() error { return nil }
