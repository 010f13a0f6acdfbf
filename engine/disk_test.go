package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
)

func TestDiskCaps(t *testing.T) {
	b := backendtest.NewFake()
	e := newEngineOn(t, b, func(c *Config) { c.DefaultDiskMB, c.MaxDiskMB = 2048, 4096 })
	ctx := context.Background()
	tests := []struct {
		name   string
		diskMB int
		want   int64 // bytes the backend is given; 0: refused
	}{
		{name: "default", diskMB: 0, want: 2048 << 20},
		{name: "own", diskMB: 512, want: 512 << 20},
		{name: "the maximum", diskMB: 4096, want: 4096 << 20},
		{name: "above the maximum", diskMB: 4097},
		{name: "below the minimum", diskMB: MinDiskMB - 1},
		{name: "negative", diskMB: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, err := e.Create(ctx, CreateOptions{DiskMB: tt.diskMB})
			if tt.want == 0 {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("Create(DiskMB %d) = %v, want ErrInvalidArgument", tt.diskMB, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := b.Spec(sb.ID).Resources.DiskBytes; got != tt.want {
				t.Errorf("the backend got DiskBytes %d, want %d", got, tt.want)
			}
			if sb.DiskMB != int(tt.want>>20) {
				t.Errorf("the record says DiskMB %d, want %d", sb.DiskMB, tt.want>>20)
			}
		})
	}
	if _, err := e.Create(ctx, CreateOptions{DiskMB: 5000}); err == nil || !strings.Contains(err.Error(), "maximum of 4096 MB") {
		t.Errorf("a create above the maximum: %v; want it named", err)
	}
}

func TestDiskConfig(t *testing.T) {
	tests := []struct {
		name             string
		def, max         int
		wantDef, wantMax int
		wantErr          bool
	}{
		{name: "zeros", wantDef: DefaultDiskMB, wantMax: DefaultMaxDiskMB},
		{name: "default above the default maximum", def: 200 << 10, wantDef: 200 << 10, wantMax: 200 << 10},
		{name: "maximum below the default default", max: 1024, wantDef: 1024, wantMax: 1024},
		{name: "maximum above the default default", max: 200 << 10, wantDef: DefaultDiskMB, wantMax: 200 << 10},
		{name: "maximum too small", max: 16, wantErr: true},
		{name: "both", def: 512, max: 1024, wantDef: 512, wantMax: 1024},
		{name: "default above the maximum", def: 2048, max: 1024, wantErr: true},
		{name: "default too small", def: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{DefaultDiskMB: tt.def, MaxDiskMB: tt.max}
			err := c.validateDisk()
			if tt.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("validateDisk() = %v, want ErrInvalidArgument", err)
				}
				return
			}
			if err != nil || c.DefaultDiskMB != tt.wantDef || c.MaxDiskMB != tt.wantMax {
				t.Errorf("validateDisk() = %v, default %d, max %d; want %d, %d", err, c.DefaultDiskMB, c.MaxDiskMB, tt.wantDef, tt.wantMax)
			}
		})
	}
}

// TestHostDiskFullCreate fills the disk of the engine's state: a create is
// refused at once, as unavailable, naming the disk, and the backend never
// sees it; once there is room, creates work. A backend failing with ENOSPC
// is reported the same way.
func TestHostDiskFullCreate(t *testing.T) {
	testutil.RequiresRoot(t)
	mnt := testutil.ScratchFS(t, 64<<20+minHostFreeBytes)
	b := backendtest.NewFake()
	e := newEngineOn(t, b, func(c *Config) { c.Root = filepath.Join(mnt, "engine") })
	ctx := context.Background()

	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, testutil.FreeBytes(t, mnt)-minHostFreeBytes/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = e.Create(ctx, CreateOptions{})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "disk is full") || !strings.Contains(err.Error(), mnt) {
		t.Errorf("Create on a full disk = %v; want ErrUnavailable naming the disk", err)
	}
	if ids, _ := b.List(ctx); len(ids) != 0 {
		t.Errorf("the backend was asked to start %v", ids)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Create(ctx, CreateOptions{}); err != nil {
		t.Errorf("Create once there is room: %v", err)
	}

	b.FailStarts(fmt.Errorf("write config.json: %w", syscall.ENOSPC))
	_, err = e.Create(ctx, CreateOptions{})
	if !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "free space on it and retry") {
		t.Errorf("Create whose backend ran out of disk = %v; want ErrUnavailable saying what to do", err)
	}
}
