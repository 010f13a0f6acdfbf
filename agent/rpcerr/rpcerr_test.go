package rpcerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
)

func TestToConnect(t *testing.T) {
	already := connect.NewError(connect.CodeAborted, errors.New("x"))
	tests := []struct {
		name string
		err  error
		want connect.Code
	}{
		{"not found", fmt.Errorf("pid 7: %w", errdefs.ErrNotFound), connect.CodeNotFound},
		{"already exists", fmt.Errorf("dir: %w", errdefs.ErrAlreadyExists), connect.CodeAlreadyExists},
		{"disk full", fmt.Errorf("write: %w", errdefs.ErrResourceExhausted), connect.CodeResourceExhausted},
		{"deadline", context.DeadlineExceeded, connect.CodeDeadlineExceeded},
		{"unclassified", errors.New("boom"), connect.CodeInternal},
		{"connect error kept", already, connect.CodeAborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := connect.CodeOf(ToConnect(tt.err)); got != tt.want {
				t.Errorf("code = %v, want %v", got, tt.want)
			}
		})
	}
	if ToConnect(nil) != nil {
		t.Error("ToConnect(nil) != nil")
	}
}
