package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
)

type cpOptions struct {
	api      apiOptions
	src, dst string
	user     string
}

func newCpCmd(g *globals) *cobra.Command {
	o := &cpOptions{}
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file between the host and a sandbox of `tupper serve`",
		Long: `Copy one file between the host and a running sandbox, either way. The
sandbox side is written ID:PATH; a relative PATH is taken from the user's
home directory. When DST is a directory (or ends with /) the file keeps its
name. The content is streamed, never held whole in memory.

Directories are not copied: pipe tar through ` + "`tupper exec --stdin`" + ` instead.
A local path that contains a colon is written with a leading ./ or /.`,
		Example: `  tupper cp ./data.csv "$id":/home/user/
  tupper cp "$id":/home/user/out.png ./out.png
  tar c src | tupper exec --stdin "$id" -- tar x -C /home/user`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.src, o.dst = args[0], args[1]
			return runCp(cmd.Context(), g, o)
		},
	}
	cmd.Flags().StringVarP(&o.user, "user", "u", "", "user to read or write as in the sandbox (default user)")
	addAPIFlags(cmd, &o.api)
	return cmd
}

// sandboxPath is the ID:PATH side of a copy.
type sandboxPath struct {
	id, path string
}

// parseCopyArg reads ID:PATH. Anything else, including a path that starts
// with / or . or whose part before the colon is not shaped like a sandbox
// id, is a host path.
func parseCopyArg(s string) (sandboxPath, bool) {
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return sandboxPath{}, false
	}
	id, p, ok := strings.Cut(s, ":")
	if !ok || id == "" || !isSandboxID(id) {
		return sandboxPath{}, false
	}
	return sandboxPath{id: id, path: p}, true
}

// isSandboxID reports whether s is shaped like a sandbox id: letters,
// digits and dashes.
func isSandboxID(s string) bool {
	if len(s) > 40 || s[0] == '-' {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func runCp(ctx context.Context, g *globals, o *cpOptions) error {
	src, srcRemote := parseCopyArg(o.src)
	dst, dstRemote := parseCopyArg(o.dst)
	switch {
	case srcRemote && dstRemote:
		return fmt.Errorf("cp copies between the host and a sandbox; to copy between sandboxes, copy through the host")
	case !srcRemote && !dstRemote:
		return fmt.Errorf("cp needs one side written ID:PATH (a sandbox), for example `tupper cp ./file %s:/home/user/`", "ID")
	}
	r, err := o.api.dial()
	if err != nil {
		return err
	}
	opts := asUser(o.user)
	if dstRemote {
		return copyIn(ctx, r, o.src, dst, opts)
	}
	return copyOut(ctx, r, src, o.dst, opts)
}

// copyIn copies the host file local into the sandbox.
func copyIn(ctx context.Context, r *remote, local string, dst sandboxPath, opts []sdk.FileOption) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%s is a directory: cp copies single files (for a directory: tar c %s | tupper exec --stdin %s -- tar x -C DIR)", local, local, dst.id)
	}
	sb, err := r.connect(ctx, dst.id)
	if err != nil {
		return err
	}
	target := dst.path
	if target == "" || strings.HasSuffix(target, "/") {
		target = path.Join(target, filepath.Base(local))
	} else if e, err := sb.Files.Stat(ctx, target, opts...); err == nil && e.Type == sdk.FileTypeDir {
		target = path.Join(target, filepath.Base(local))
	} else if err != nil && !sdk.IsNotFound(err) {
		return r.data(ctx, err, dst.id)
	}
	if _, err := sb.Files.WriteStream(ctx, target, f, opts...); err != nil {
		return r.data(ctx, fmt.Errorf("copy %s to %s:%s: %w", local, dst.id, target, err), dst.id)
	}
	return nil
}

// copyOut copies a file of the sandbox to the host path local.
func copyOut(ctx context.Context, r *remote, src sandboxPath, local string, opts []sdk.FileOption) error {
	if src.path == "" {
		return fmt.Errorf("%s: name the file to copy, as %s:PATH", src.id, src.id)
	}
	sb, err := r.connect(ctx, src.id)
	if err != nil {
		return err
	}
	e, err := sb.Files.Stat(ctx, src.path, opts...)
	if sdk.IsNotFound(err) {
		return fmt.Errorf("%s:%s: no such file in the sandbox", src.id, src.path)
	}
	if err != nil {
		return r.data(ctx, err, src.id)
	}
	if e.Type == sdk.FileTypeDir {
		return fmt.Errorf("%s:%s is a directory: cp copies single files (for a directory: tupper exec %s -- tar c -C %s . | tar x)", src.id, src.path, src.id, src.path)
	}
	if st, err := os.Stat(local); (err == nil && st.IsDir()) || strings.HasSuffix(local, string(os.PathSeparator)) {
		local = filepath.Join(local, path.Base(e.Path))
	}
	rc, err := sb.Files.ReadStream(ctx, src.path, opts...)
	if err != nil {
		return r.data(ctx, err, src.id)
	}
	defer rc.Close()
	perm := e.Mode.Perm()
	if perm == 0 {
		perm = 0o644
	}
	if err := writeLocal(local, perm, rc); err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return r.data(ctx, fmt.Errorf("copy %s:%s to %s: %w", src.id, src.path, local, err), src.id)
	}
	return nil
}

// writeLocal writes what r yields to the host file name. A regular file
// (or a new one) is written beside and renamed into place, so that a copy
// that fails half-way leaves what was there; anything else (a device, a
// pipe) is written in place.
func writeLocal(name string, perm os.FileMode, r io.Reader) error {
	if st, err := os.Stat(name); err == nil && !st.Mode().IsRegular() {
		f, err := os.OpenFile(name, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		return errors.Join(err, f.Close())
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tupper-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if _, err := io.Copy(tmp, r); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return err
	}
	done = true
	return nil
}
