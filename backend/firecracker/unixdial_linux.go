package firecracker

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxSunPath is how long a unix socket's path may be, with its NUL.
const maxSunPath = len(unix.RawSockaddrUnix{}.Path)

// dialUnix connects to the unix socket at path. A path too long for a
// socket address (state directories nest deep, the jailer's chroots
// deeper) is reached through its directory's descriptor, as
// /proc/self/fd/<n>/<name>.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) < maxSunPath {
		return d.DialContext(ctx, "unix", path)
	}
	dir, err := os.OpenFile(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	defer dir.Close()
	short := fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path))
	if len(short) >= maxSunPath {
		return nil, fmt.Errorf("dial %s: the socket's name is too long", path)
	}
	c, err := d.DialContext(ctx, "unix", short)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	return c, nil
}
