// Command tupper runs untrusted code in disposable sandboxes on your own
// machine. See the README for its faces: the CLI, the daemon, the SDK.
package main

import (
	"os"

	"github.com/lightbearco/tupper/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
