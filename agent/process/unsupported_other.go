//go:build !linux

package process

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/lightbearco/tupper/errdefs"
	pb "github.com/lightbearco/tupper/proto/process"
)

// The agent runs only inside Linux sandboxes. Elsewhere the package builds,
// so that code importing it compiles, but starts nothing.

func (s *Service) spawn(*command, *pb.StartRequest, *subscriber) (*handle, error) {
	return nil, fmt.Errorf("start process: %w on this OS", errdefs.ErrNotSupported)
}

func setWinsize(*os.File, winsize) error {
	return fmt.Errorf("resize pty: %w on this OS", errdefs.ErrNotSupported)
}

func killGroup(int, syscall.Signal) error {
	return fmt.Errorf("signal process group: %w on this OS", errdefs.ErrNotSupported)
}

func drainNow(*os.File, []byte, func([]byte)) {}

// Supervise is unsupported outside Linux.
func Supervise(*slog.Logger) error {
	return fmt.Errorf("supervise children: %w on this OS", errdefs.ErrNotSupported)
}

// Shutdown is unsupported outside Linux; there is nothing to stop.
func Shutdown(context.Context, os.Signal) error { return nil }
