// Command tupper-agent is the agent inside every Tupper sandbox: it runs as
// the sandbox's PID 1 and serves the envd protocol (processes, files) on
// :49983. See package agent.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	if err := hideToken(); err != nil {
		fmt.Fprintln(os.Stderr, "tupper-agent:", err)
		os.Exit(1)
	}
	opts, err := parseFlags(os.Args[1:])
	if err == nil {
		err = run(opts)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tupper-agent:", err)
		os.Exit(1)
	}
}
