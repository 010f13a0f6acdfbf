//go:build !linux

package main

import (
	"errors"
	"log/slog"
)

const interpreterCommand = "code-interpreter"

var errInterpreterUnsupported = errors.New("the code interpreter runs only on Linux")

// interpreterSupervisor is never made outside Linux.
type interpreterSupervisor struct{}

func (*interpreterSupervisor) setToken(string) {}
func (*interpreterSupervisor) stop()           {}

func startCodeInterpreter(*slog.Logger, string, string, []string, string) (*interpreterSupervisor, error) {
	return nil, errInterpreterUnsupported
}

func serveCodeInterpreter([]string) error { return errInterpreterUnsupported }
