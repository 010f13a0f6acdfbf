//go:build !linux

package main

import (
	"errors"
	"log/slog"
)

const interpreterCommand = "code-interpreter"

var errInterpreterUnsupported = errors.New("the code interpreter runs only on Linux")

func startCodeInterpreter(*slog.Logger, string, string, []string, string) (func(string), error) {
	return nil, errInterpreterUnsupported
}

func serveCodeInterpreter([]string) error { return errInterpreterUnsupported }
