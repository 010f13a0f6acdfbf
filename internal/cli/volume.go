package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
)

func newVolumeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"volumes"},
		Short:   "Keep volumes: directories that sandboxes mount and that outlive them (create, ls, rm, ls-files, cat, put)",
		Long: `A volume is a directory kept by ` + "`tupper serve`" + ` for your team, capped in size, that
sandboxes mount read-write at create (E2B's volumeMounts, or the Go SDK's
CreateOptions.VolumeMounts), several at once: what one writes, the others read at once,
and it stays when they are gone. Its files are read and written here
without any sandbox. A volume that a sandbox (running or paused) or a
snapshot mounts is not removed.`,
		Example: `  tupper volume create data --size 2G
  tupper volume put data /inputs/prompt.txt ./prompt.txt
  tupper volume ls-files data / --depth 2
  tupper volume cat data /outputs/result.json
  tupper volume rm data`,
	}
	cmd.AddCommand(newVolumeCreateCmd(g), newVolumeLsCmd(g), newVolumeRmCmd(g), newVolumeLsFilesCmd(g), newVolumeCatCmd(g), newVolumePutCmd(g))
	return cmd
}

// volumeJSON is how the CLI prints a volume with --json: the API's names.
type volumeJSON struct {
	VolumeID  string    `json:"volumeID"`
	Name      string    `json:"name"`
	SizeMB    int64     `json:"sizeMB"`
	CreatedAt time.Time `json:"createdAt"`
}

func toVolumeJSON(v *sdk.VolumeInfo) volumeJSON {
	return volumeJSON{VolumeID: v.ID, Name: v.Name, SizeMB: v.SizeMB, CreatedAt: v.CreatedAt}
}

// volumeError explains an error of a call about volume ref.
func volumeError(r *remote, err error, ref string) error {
	switch {
	case sdk.IsNotFound(err):
		return fmt.Errorf("volume %s not found: run `tupper volume ls` to see your team's", ref)
	case sdk.IsDiskFull(err):
		return fmt.Errorf("%w: volume %s is full: remove files from it, or make a larger one (tupper volume create --size)", err, ref)
	}
	return r.control(err, "")
}

// connectVolume opens the volume named or of id ref.
func connectVolume(ctx context.Context, r *remote, ref string) (*sdk.Volume, error) {
	id, err := volumeID(ctx, r, ref)
	if err != nil {
		return nil, err
	}
	v, err := r.ConnectVolume(ctx, id)
	if err != nil {
		return nil, volumeError(r, err, ref)
	}
	return v, nil
}

// volumeID is the id of the volume named ref, else ref itself.
func volumeID(ctx context.Context, r *remote, ref string) (string, error) {
	list, err := r.ListVolumes(ctx)
	if err != nil {
		return "", r.control(err, "")
	}
	for _, v := range list {
		if v.Name == ref {
			return v.ID, nil
		}
	}
	return ref, nil
}

type volumeCreateOptions struct {
	api  apiOptions
	name string
	size sizeFlag
	json bool
}

func newVolumeCreateCmd(g *globals) *cobra.Command {
	o := &volumeCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME [--size 1G]",
		Short: "Make a volume and print its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			return runVolumeCreate(cmd.Context(), g, o)
		},
	}
	cmd.Flags().Var(&o.size, "size", "the volume's size cap, such as 512M or 2G (default: the daemon's, 1G)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the volume's description as JSON instead of its id")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runVolumeCreate(ctx context.Context, g *globals, o *volumeCreateOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	v, err := r.CreateVolume(ctx, o.name, o.size.mb)
	if err != nil {
		return r.control(err, "")
	}
	if o.json {
		return printJSON(g.stdout, toVolumeJSON(&v.VolumeInfo))
	}
	fmt.Fprintf(g.stderr, "Made volume %q (%d MB). Sandboxes mount it by name: E2B's Sandbox.create({volumeMounts: {'/data': %q}})\n", v.Name, v.SizeMB, v.Name)
	_, err = fmt.Fprintln(g.stdout, v.ID)
	return err
}

type volumeLsOptions struct {
	api  apiOptions
	json bool
}

func newVolumeLsCmd(g *globals) *cobra.Command {
	o := &volumeLsOptions{}
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your team's volumes, oldest first",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVolumeLs(cmd.Context(), g, o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print a JSON array")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runVolumeLs(ctx context.Context, g *globals, o *volumeLsOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	list, err := r.ListVolumes(ctx)
	if err != nil {
		return r.control(err, "")
	}
	if o.json {
		out := make([]volumeJSON, 0, len(list))
		for i := range list {
			out = append(out, toVolumeJSON(&list[i]))
		}
		return printJSON(g.stdout, out)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVOLUME ID\tSIZE\tCREATED")
	for _, v := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, v.ID, (&sizeFlag{mb: int(v.SizeMB)}).String(), v.CreatedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func newVolumeRmCmd(g *globals) *cobra.Command { return newEachCmd(g, volumeRmSpec()) }

// volumeRmSpec is `tupper volume rm`.
func volumeRmSpec() eachSpec {
	return eachSpec{
		use:   "rm NAME|ID...",
		short: "Delete volumes and their files; one that a sandbox or snapshot mounts is kept",
		do: func(ctx context.Context, r *remote, ref string) error {
			id, err := volumeID(ctx, r, ref)
			if err != nil {
				return err
			}
			return r.DeleteVolume(ctx, id)
		},
		explain: volumeError,
	}
}

type volumeLsFilesOptions struct {
	api    apiOptions
	volume string
	path   string
	depth  int
	json   bool
}

func newVolumeLsFilesCmd(g *globals) *cobra.Command {
	o := &volumeLsFilesOptions{}
	cmd := &cobra.Command{
		Use:   "ls-files VOLUME [PATH] [--depth N]",
		Short: "List the files of a volume's directory (default /)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.volume, o.path = args[0], "/"
			if len(args) == 2 {
				o.path = args[1]
			}
			return runVolumeLsFiles(cmd.Context(), g, o)
		},
	}
	cmd.Flags().IntVar(&o.depth, "depth", 1, "how many levels down to list")
	cmd.Flags().BoolVar(&o.json, "json", false, "print a JSON array")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runVolumeLsFiles(ctx context.Context, g *globals, o *volumeLsFilesOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	v, err := connectVolume(ctx, r, o.volume)
	if err != nil {
		return err
	}
	list, err := v.List(ctx, o.path, o.depth)
	if err != nil {
		return volumeFileError(r, err, o.volume, o.path)
	}
	if o.json {
		if list == nil {
			list = []sdk.VolumeEntry{}
		}
		return printJSON(g.stdout, list)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tOWNER\tSIZE\tMODIFIED\tPATH")
	for _, e := range list {
		p := e.Path
		switch e.Type {
		case "directory":
			p += "/"
		case "symlink":
			p += " -> " + e.Target
		}
		fmt.Fprintf(tw, "%s\t%d:%d\t%d\t%s\t%s\n", modeString(e), e.UID, e.GID, e.Size, e.Mtime.Local().Format(time.DateTime), p)
	}
	return tw.Flush()
}

// modeString is e's type and mode as ls shows them.
func modeString(e sdk.VolumeEntry) string {
	m := os.FileMode(e.Mode & 0o777)
	switch e.Type {
	case "directory":
		m |= os.ModeDir
	case "symlink":
		m |= os.ModeSymlink
	}
	return m.String()
}

// volumeFileError explains an error of a call about path in volume ref.
func volumeFileError(r *remote, err error, ref, path string) error {
	if sdk.IsNotFound(err) {
		return fmt.Errorf("%s: no such file or directory in volume %s", path, ref)
	}
	return volumeError(r, err, ref)
}

type volumeCatOptions struct {
	api    apiOptions
	volume string
	path   string
}

func newVolumeCatCmd(g *globals) *cobra.Command {
	o := &volumeCatOptions{}
	cmd := &cobra.Command{
		Use:   "cat VOLUME PATH",
		Short: "Print a file of a volume",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.volume, o.path = args[0], args[1]
			return runVolumeCat(cmd.Context(), g, o)
		},
	}
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runVolumeCat(ctx context.Context, g *globals, o *volumeCatOptions) error {
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	v, err := connectVolume(ctx, r, o.volume)
	if err != nil {
		return err
	}
	rc, err := v.Open(ctx, o.path)
	if err != nil {
		return volumeFileError(r, err, o.volume, o.path)
	}
	defer rc.Close()
	_, err = io.Copy(g.stdout, rc)
	return err
}

type volumePutOptions struct {
	api    apiOptions
	volume string
	path   string
	from   string
}

func newVolumePutCmd(g *globals) *cobra.Command {
	o := &volumePutOptions{}
	cmd := &cobra.Command{
		Use:   "put VOLUME PATH [FILE|-]",
		Short: "Write a file of a volume from a local file or standard input (-, the default)",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.volume, o.path, o.from = args[0], args[1], "-"
			if len(args) == 3 {
				o.from = args[2]
			}
			return runVolumePut(cmd.Context(), g, o)
		},
	}
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runVolumePut(ctx context.Context, g *globals, o *volumePutOptions) error {
	in := g.stdin
	if o.from != "-" {
		f, err := os.Open(o.from)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	if in == nil {
		in = os.Stdin
	}
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	v, err := connectVolume(ctx, r, o.volume)
	if err != nil {
		return err
	}
	e, err := v.Write(ctx, o.path, in)
	if err != nil {
		return volumeFileError(r, err, o.volume, o.path)
	}
	fmt.Fprintf(g.stderr, "wrote %d bytes to %s in volume %s\n", e.Size, e.Path, v.Name)
	return nil
}
