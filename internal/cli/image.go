package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lightbearco/tupper/errdefs"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/image"
)

func newImageCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Manage images and templates (pull, import, build, ls, rm)",
	}
	cmd.AddCommand(newImagePullCmd(g), newImageImportCmd(g), newImageBuildCmd(g), newImageLsCmd(g), newImageRmCmd(g))
	return cmd
}

// openImages opens the image store that the engine uses, without the rest
// of the runtime: managing images needs no backend.
func (g *globals) openImages() (*image.Store, error) {
	return image.Open(image.Config{Root: filepath.Join(g.stateRoot(), "images"), Logger: g.logger()})
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func newImagePullCmd(g *globals) *cobra.Command {
	var (
		opts   image.PullOptions
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image from an OCI registry",
		Long: `Pull an image from an OCI registry. Progress goes to standard error: a bar
on a terminal, else lines for scripts (see docs/progress.md); --json writes
it as JSON lines on standard output instead of the image's name and id.`,
		Example: "  tupper image pull localhost:5000/tools:1 --insecure",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.openImages()
			if err != nil {
				return err
			}
			defer st.Close()
			_, err = imageRun{what: "pull", item: args[0], json: asJSON}.run(g, func(p image.Progress) ([]*image.Image, error) {
				return one(st.Pull(cmd.Context(), args[0], opts, p))
			})
			return err
		},
	}
	cmd.Flags().BoolVar(&opts.Insecure, "insecure", false, "talk plain HTTP to the registry (for a registry on loopback)")
	cmd.Flags().StringVar(&opts.Platform, "platform", "", "os/arch[/variant] to pick from a multi-platform image (default this host's)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "write the progress and the result as JSON lines on standard output")
	return cmd
}

// one makes a list of the image an operation made.
func one(img *image.Image, err error) ([]*image.Image, error) {
	if img == nil {
		return nil, err
	}
	return []*image.Image{img}, err
}

func newImageImportCmd(g *globals) *cobra.Command {
	var (
		name   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "import FILE|- [--name NAME]",
		Short: "Import a `docker save` or OCI-layout tarball",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.openImages()
			if err != nil {
				return err
			}
			defer st.Close()
			_, err = imageRun{what: "import", item: cmp.Or(name, args[0]), json: asJSON}.run(g, func(p image.Progress) ([]*image.Image, error) {
				if args[0] == "-" {
					return st.Import(cmd.Context(), g.stdin, name, p)
				}
				return st.ImportFile(cmd.Context(), args[0], name, p)
			})
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name to give the image (default the names in the tarball)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "write the progress and the result as JSON lines on standard output")
	return cmd
}

func newImageBuildCmd(g *globals) *cobra.Command {
	var (
		suite    string
		packages []string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "build NAME [--package PKG...]",
		Short: "Build a Debian image with mmdebstrap; `build base` makes the default template, `build code-interpreter` E2B's code interpreter",
		Long: `Build a Debian image with mmdebstrap. Progress goes to standard error: the
build's steps ([5/11] install packages) with a bar and an estimate of the
time left on a terminal, else lines for scripts (see docs/progress.md);
--json writes it as JSON lines on standard output. mmdebstrap's own output
goes to ROOT/logs/build-NAME.log, and to the screen too with --verbose; a
failed build names its step and quotes the log's last lines.`,
		Example: `  tupper image build base
  tupper image build code-interpreter
  tupper image build py --package python3 --package python3-numpy`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.openImages()
			if err != nil {
				return err
			}
			defer st.Close()
			opts := image.BuildOptions{Suite: suite, Packages: packages}
			if r, ok := image.Recipes[args[0]]; ok && len(packages) == 0 {
				opts.Packages, opts.Labels = r.Packages, r.Labels
			}
			if len(opts.Packages) == 0 {
				return fmt.Errorf("image build %s: name the packages to install with --package (only %s have default lists)", args[0], strings.Join(slices.Sorted(maps.Keys(image.Recipes)), " and "))
			}
			logPath := buildLogPath(g.stateRoot(), args[0])
			logFile, err := createLog(logPath)
			if err != nil {
				return err
			}
			defer logFile.Close()
			run := imageRun{what: "build", item: args[0], json: asJSON, log: logFile, show: g.verbose}
			_, err = run.run(g, func(p image.Progress) ([]*image.Image, error) {
				return one(st.BuildDebian(cmd.Context(), args[0], opts, p))
			})
			if st, serr := logFile.Stat(); err != nil && serr == nil && st.Size() > 0 {
				return fmt.Errorf("%w\nthe whole log: %s", err, logPath)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&suite, "suite", "", "Debian suite (default "+image.DefaultSuite+")")
	cmd.Flags().StringArrayVarP(&packages, "package", "p", nil, "Debian package to install (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "write the progress and the result as JSON lines on standard output")
	return cmd
}

// buildLogPath is where `image build` keeps the builder's output for the
// image name, under the state root.
func buildLogPath(root, name string) string {
	safe := strings.Map(func(r rune) rune {
		if r == '/' || r == ':' || r == '@' {
			return '_'
		}
		return r
	}, name)
	return filepath.Join(root, "logs", "build-"+safe+".log")
}

// createLog makes the file at path afresh, and its directory if need be.
func createLog(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("the build's log: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("the build's log: %w", err)
	}
	return f, nil
}

func newImageLsCmd(g *globals) *cobra.Command {
	var asJSON, quiet bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List images",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.openImages()
			if err != nil {
				return err
			}
			defer st.Close()
			imgs, err := st.List(cmd.Context())
			if err != nil {
				return err
			}
			return listImages(cmd.Context(), g, imgs, asJSON, quiet)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only names, one a line")
	return cmd
}

func listImages(_ context.Context, g *globals, imgs []*image.Image, asJSON, quiet bool) error {
	switch {
	case asJSON:
		type row struct {
			ID      string    `json:"id"`
			Names   []string  `json:"names"`
			Size    int64     `json:"size"`
			Created time.Time `json:"created"`
		}
		rows := make([]row, 0, len(imgs))
		for _, img := range imgs {
			rows = append(rows, row{img.ID, img.Names, img.Size, img.Created})
		}
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case quiet:
		for _, img := range imgs {
			for _, n := range img.Names {
				fmt.Fprintln(g.stdout, n)
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tSIZE\tCREATED")
	for _, img := range imgs {
		names := strings.Join(img.Names, ",")
		if names == "" {
			names = "<none>"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", names, shortID(img.ID), humanSize(img.Size), img.Created.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func newImageRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove image names; data no name uses any more is deleted",
		Long: `Remove image names. Data that no name uses any more is deleted, except while
sandboxes run on it: then it stays until the last of them ends.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.openImages()
			if err != nil {
				return err
			}
			defer st.Close()
			for _, n := range args {
				img, err := st.Resolve(cmd.Context(), n)
				if err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
					return err
				}
				if err := st.Remove(cmd.Context(), n); err != nil {
					return err
				}
				fmt.Fprintln(g.stdout, "removed", n)
				if img == nil {
					continue
				}
				if holders, err := st.Holders(cmd.Context(), img.ID); err == nil && len(holders) > 0 {
					fmt.Fprintf(g.stderr, "tupper: %d sandbox(es) run on %s: its data stays until they end\n", len(holders), n)
				}
			}
			return nil
		},
	}
}
