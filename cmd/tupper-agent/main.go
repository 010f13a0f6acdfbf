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
	var err error
	if len(os.Args) > 1 && os.Args[1] == interpreterCommand {
		err = serveCodeInterpreter(os.Args[2:])
	} else {
		var opts options
		if opts, err = parseFlags(os.Args[1:]); err == nil {
			err = run(opts)
		}
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tupper-agent:", err)
		os.Exit(1)
	}
}
