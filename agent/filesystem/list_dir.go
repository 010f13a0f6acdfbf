package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/asuser"
	"github.com/lightbearco/tupper/errdefs"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// ListDir lists a directory's entries, descending depth levels (0 counts as
// 1, the directory's own entries). Entries come in lexical order, each
// directory's entries right after it, and describe links themselves: the
// walk never follows a link into another tree. A link given as the path
// itself is followed, so listing "~/data" works when data is a link to a
// directory; the entries' paths still start with the path as given.
//
// It lists as the request's user: a directory the user may not read is
// permission_denied, and unreadable subdirectories are left out.
//
// A missing path is not_found; a path that is not a directory is
// invalid_argument "not a directory".
func (s *Service) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	u, p, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	var entries []*fspb.EntryInfo
	err = asuser.Do(u, func() error {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("%s: not a directory: %w", p, errdefs.ErrInvalidArgument)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return err
		}
		entries, err = listTree(ctx, p, real, depth)
		return err
	})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
}

// listTree walks real down to depth levels and reports each entry under the
// path the client asked for (shown), which differs from real when the
// requested path goes through a link.
func listTree(ctx context.Context, shown, real string, depth int) ([]*fspb.EntryInfo, error) {
	names := newNamer()
	var entries []*fspb.EntryInfo
	err := filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == real {
				return err
			}
			// An entry that vanished mid-walk, or an unreadable
			// subdirectory, should not sink the whole listing.
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		if p == real {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := p[len(real):]
		if real != "/" {
			rel = rel[1:]
		}
		level := strings.Count(rel, string(filepath.Separator)) + 1
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		entries = append(entries, names.entry(filepath.Join(shown, rel), fi))
		if d.IsDir() && level >= depth {
			return filepath.SkipDir
		}
		return nil
	})
	return entries, err
}
