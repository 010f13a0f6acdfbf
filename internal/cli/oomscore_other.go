//go:build !linux

package cli

// shieldDaemon does nothing outside Linux.
func shieldDaemon() error { return nil }
