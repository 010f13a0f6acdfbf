package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/proto"
)

// Version is tupper's version: set at link time by release builds
// (scripts/dist.sh: -X github.com/lightbearco/tupper/internal/cli.Version=…),
// else the module's version when built by `go install …@version`, else
// "devel".
var Version = ""

// version returns Version, or what the build knows of it.
func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print tupper's version, the envd protocol it speaks and its platform",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintf(g.stdout, "tupper %s (envd %s, %s, %s/%s)\n", version(), proto.EnvdVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
