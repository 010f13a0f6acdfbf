//go:build linux

package main

import "golang.org/x/sys/unix"

// guardMemory makes this process undumpable: its /proc/<pid>/mem, environ
// and fd entries become root's, so that a process of the same user (the
// code interpreter runs as `user`, as every cell it runs does) cannot read
// the access token out of its memory. An exec makes a process dumpable
// again, so every mode of the agent calls it at its start; the programs
// the agent starts are dumpable as usual.
func guardMemory() error { return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
