//go:build !linux

package main

import "log/slog"

// enforceLimits does nothing outside Linux, where no sandbox runs the agent.
func enforceLimits(*slog.Logger) {}
