package image_test

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
)

// TestLeaseKeepsDataInUse checks that removing the last name of an image a
// sandbox runs on keeps the image's data until the lease goes, and that a
// second process opening the same store sees the lease.
func TestLeaseKeepsDataInUse(t *testing.T) {
	testutil.RequiresRoot(t)
	s := newStore(t)
	a := importImage(t, s, imageOf(t, layerTar(t, file("a", "a", 0o644))), "a")
	if err := s.Lease(ctx(t), "sandbox-1", a.ID); err != nil {
		t.Fatal(err)
	}
	other := openStore(t, s.Root()) // as `tupper image rm` would, beside the daemon
	if err := other.Remove(ctx(t), "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Resolve(ctx(t), "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the name is still there: %v", err)
	}
	if _, err := os.Stat(a.RootFS); err != nil {
		t.Fatalf("the root filesystem of a leased image was collected: %v", err)
	}
	if err := other.Prune(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.RootFS); err != nil {
		t.Fatalf("prune collected a leased root filesystem: %v", err)
	}
	if h, err := other.Holders(ctx(t), a.ID); err != nil || !slices.Equal(h, []string{"sandbox-1"}) {
		t.Errorf("Holders = %v, %v", h, err)
	}
	if err := s.Release(ctx(t), "sandbox-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(a.RootFS); !os.IsNotExist(err) {
		t.Errorf("the root filesystem outlived its last lease: %v", err)
	}
	if err := s.Release(ctx(t), "sandbox-1"); err != nil {
		t.Errorf("a second release: %v", err)
	}
	if err := s.Lease(ctx(t), "sandbox-2", a.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a lease of a removed image: %v, want ErrNotFound", err)
	}
	if err := s.Lease(ctx(t), "../x", a.ID); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a holder with a path: %v, want ErrInvalidArgument", err)
	}
}
