// Command tupper-agent is the agent inside every Tupper sandbox: it runs as
// the sandbox's PID 1 and serves the envd protocol (processes, files) on
// :49983, and on a vsock port too in a microVM (--vsock-port), where it
// also forwards the host to the sandbox's other ports (forward.go). In a
// microVM it is the init as well: started as /init from the initramfs, it
// mounts the sandbox's root and executes itself as the agent
// (vminit_linux.go). See package agent.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	if isVMInit() {
		vmInitMain()
		return
	}
	if err := guardMemory(); err != nil {
		fmt.Fprintln(os.Stderr, "tupper-agent:", err)
		os.Exit(1)
	}
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
