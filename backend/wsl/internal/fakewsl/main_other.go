//go:build !linux

// Command fakewsl is a stand-in for wsl.exe that runs on Linux only; see
// main_linux.go.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "fakewsl: the stand-in for wsl.exe runs on Linux only")
	os.Exit(1)
}
