//go:build !unix

package main

// lockDir does not lock where there is no flock: run one command at a time.
func lockDir(string) (func(), error) { return func() {}, nil }
