package errdefs

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBusy(t *testing.T) {
	err := fmt.Errorf("create: %w", Busy(3*time.Second, "%d creates are waiting", 8))
	if !errors.Is(err, ErrResourceExhausted) {
		t.Errorf("%v is not ErrResourceExhausted", err)
	}
	if d, ok := RetryAfter(err); !ok || d != 3*time.Second {
		t.Errorf("RetryAfter = %v, %v; want 3s", d, ok)
	}
	if err.Error() != "create: 8 creates are waiting" {
		t.Errorf("message %q", err)
	}
	if _, ok := RetryAfter(fmt.Errorf("x: %w", ErrResourceExhausted)); ok {
		t.Error("a plain ErrResourceExhausted says when to retry")
	}
}
