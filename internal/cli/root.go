// Package cli holds the tupper command's cobra commands, one file per noun
// or verb. Each command has an options struct and a run function that tests
// call without flags.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/local"
)

// exitError carries a process exit code out of a command without printing
// anything more.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// globals are the flags every command shares.
type globals struct {
	root    string
	backend string
	// backendOpts are the default backend's options, KEY=VALUE.
	backendOpts []string
	verbose     bool
	stdin       io.Reader
	stdout      io.Writer
	stderr      io.Writer
}

func (g *globals) logger() *slog.Logger { return g.loggerAt(slog.LevelWarn) }

// loggerAt logs from level up, or everything with --verbose. One-shot
// commands keep quiet below warnings; the daemon tells what it does.
func (g *globals) loggerAt(level slog.Level) *slog.Logger {
	if g.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
}

// openLocal opens an in-process Tupper runtime with the global flags and
// its images in imageRoot (empty means <root>/images).
func (g *globals) openLocal(ctx context.Context, imageRoot string) (*local.Runtime, error) {
	opts, err := g.backendOptions()
	if err != nil {
		return nil, err
	}
	return local.Open(ctx, local.Config{Root: g.root, ImageRoot: imageRoot, Backend: g.backend, BackendOptions: opts, Logger: g.logger()})
}

// backendOptions parses --backend-opt into the default backend's options;
// the backend refuses keys it does not know when it opens.
func (g *globals) backendOptions() (map[string]string, error) {
	if len(g.backendOpts) == 0 {
		return nil, nil
	}
	opts := map[string]string{}
	for _, kv := range g.backendOpts {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--backend-opt %q: want KEY=VALUE: %w", kv, errdefs.ErrInvalidArgument)
		}
		opts[k] = v
	}
	return opts, nil
}

// Main runs the tupper command line and returns its exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(stderr, "tupper:", err)
	return 1
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "tupper",
		Short:         "Run untrusted code in disposable sandboxes on your own machine",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.root, "root", "", "state directory (default $TUPPER_ROOT or "+local.DefaultRoot+")")
	root.PersistentFlags().StringVar(&g.backend, "backend", "", "sandbox backend `NAME`: the default of serve, mcp and run; the one create asks the daemon for; the one doctor judges (default: the daemon's, else "+local.DefaultBackend+" on this OS)")
	root.PersistentFlags().StringArrayVar(&g.backendOpts, "backend-opt", nil, "an option of the default backend, `KEY=VALUE` (repeatable; see the backend's doc), for serve, mcp and run")
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "log what happens")
	root.AddCommand(newImageCmd(g), newRunCmd(g), newServeCmd(g), newMCPCmd(g))
	root.AddCommand(newPauseCmd(g), newResumeCmd(g), newSnapshotCmd(g), newForkCmd(g))
	root.AddCommand(newSecretCmd(g))
	root.AddCommand(newVolumeCmd(g))
	root.AddCommand(newTemplateCmd(g))
	root.AddCommand(newLogsCmd(g), newTopCmd(g))
	root.AddCommand(newDashboardCmd(g))
	root.AddCommand(newCreateCmd(g), newLsCmd(g), newInfoCmd(g), newExecCmd(g), newRunCodeCmd(g), newShellCmd(g), newCpCmd(g), newReadCmd(g), newWriteCmd(g), newKillCmd(g), newTimeoutCmd(g), newNetworkCmd(g), newKeysCmd(g), newDoctorCmd(g), newBenchCmd(g), newVersionCmd(g))
	return root
}
