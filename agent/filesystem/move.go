package filesystem

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/asuser"
	"github.com/lightbearco/tupper/agent/filesystem/userfs"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// Move renames source to destination as the request's user, creating the
// destination's missing parents for that user; what the user may not rename
// is permission_denied. Like envd (and Go's os.Rename), it
// replaces an existing destination file but never a directory: a
// destination directory is already_exists (Move does not move into it, as
// mv would). A missing source is not_found, and a move across filesystems
// failed_precondition, since only a same-filesystem rename is atomic.
func (s *Service) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	u, src, err := s.resolve(req, req.Msg.GetSource())
	if err != nil {
		return nil, toConnect(err)
	}
	dst, err := u.ResolvePath(req.Msg.GetDestination())
	if err != nil {
		return nil, toConnect(err)
	}
	var e *fspb.EntryInfo
	err = asuser.Do(u, func() (err error) {
		if _, err := os.Lstat(src); err != nil {
			return err
		}
		if err := userfs.MkdirAll(filepath.Dir(dst), u); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return fmt.Errorf("move: %w", err)
		}
		e, err = statEntry(dst)
		return err
	})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: e}), nil
}
