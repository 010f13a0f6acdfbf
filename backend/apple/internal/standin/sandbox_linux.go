package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/lightbearco/tupper/backend"
	_ "github.com/lightbearco/tupper/backend/runc" // registers "runc"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
)

// sandboxEngine runs each container as a sandbox of Tupper's runc backend
// (under <dir>/runc) and keeps images in a Tupper image store (under
// <dir>/images). Both are opened on first use, so that commands that need
// neither stay quick.
type sandboxEngine struct {
	dir   string
	log   *slog.Logger
	store *image.Store
	be    backend.Backend
}

func newSandboxEngine(_ context.Context, dir string) (engine, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the stand-in runs sandboxes as root only: run it as root, or set " + envAddr + " for the scripted mode")
	}
	return &sandboxEngine{dir: dir, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}, nil
}

func (e *sandboxEngine) imageStore() (*image.Store, error) {
	if e.store == nil {
		s, err := image.Open(image.Config{Root: filepath.Join(e.dir, "images"), Logger: e.log})
		if err != nil {
			return nil, err
		}
		e.store = s
	}
	return e.store, nil
}

func (e *sandboxEngine) sandboxes() (backend.Backend, error) {
	if e.be == nil {
		// Sealed: the stand-in's sandboxes reach nothing; the host
		// reaches them at their addresses, as a Mac reaches its
		// containers.
		be, err := backend.Open("runc", backend.Config{Root: filepath.Join(e.dir, "runc"), Logger: e.log, Network: backend.NetworkConfig{NoEgress: true}})
		if err != nil {
			return nil, err
		}
		e.be = be
	}
	return e.be, nil
}

// loadImage imports the archive into the image store, which reads an OCI
// layout's names from its annotations, as Apple's loader does.
func (e *sandboxEngine) loadImage(ctx context.Context, p string) ([]string, error) {
	s, err := e.imageStore()
	if err != nil {
		return nil, err
	}
	imgs, err := s.ImportFile(ctx, p, "", nil)
	if err != nil {
		return nil, fmt.Errorf("failed to load archive %s: %w", p, err)
	}
	var names []string
	for _, i := range imgs {
		names = append(names, i.Names...)
	}
	return names, nil
}

func (e *sandboxEngine) images(ctx context.Context) ([]imageInfo, error) {
	s, err := e.imageStore()
	if err != nil {
		return nil, err
	}
	imgs, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []imageInfo
	for _, i := range imgs {
		for _, n := range i.Names {
			out = append(out, imageInfo{Reference: n, MediaType: i.Manifest.MediaType, Digest: i.Manifest.Digest, Size: i.Manifest.Size})
		}
	}
	return out, nil
}

func (e *sandboxEngine) image(ctx context.Context, ref string) (*imageInfo, error) {
	s, err := e.imageStore()
	if err != nil {
		return nil, err
	}
	i, err := s.Resolve(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w (the stand-in pulls nothing)", ref, err)
	}
	return &imageInfo{Reference: ref, MediaType: i.Manifest.MediaType, Digest: i.Manifest.Digest, Size: i.Manifest.Size}, nil
}

// sandboxID is the runc sandbox of container name: a sandbox id is at most
// 40 of [a-z0-9-], a container name up to 63 of [A-Za-z0-9_.-].
func sandboxID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "ct-" + hex.EncodeToString(sum[:])[:24]
}

// start boots c's image with its entrypoint, found on the host through
// c's bind mounts, as the sandbox's agent.
func (e *sandboxEngine) start(ctx context.Context, c *container) error {
	s, err := e.imageStore()
	if err != nil {
		return err
	}
	img, err := s.Resolve(ctx, c.Image.Reference)
	if err != nil {
		return err
	}
	agent, err := c.hostPath(c.Entrypoint)
	if err != nil {
		return err
	}
	be, err := e.sandboxes()
	if err != nil {
		return err
	}
	spec := &backend.Spec{
		ID:        sandboxID(c.ID),
		RootFS:    img.RootFS,
		Env:       c.Env,
		Hostname:  c.ID,
		Agent:     backend.Agent{Path: agent, Args: c.Args},
		Resources: backend.Resources{CPUs: float64(c.CPUs), MemoryBytes: c.MemoryBytes, Pids: int64(c.NProc)},
		Labels:    map[string]string{"container": c.ID},
	}
	sb, err := be.Start(ctx, spec)
	if err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(sb.AgentAddr)
	if err != nil {
		be.Stop(context.WithoutCancel(ctx), spec.ID)
		return fmt.Errorf("sandbox address %q: %w", sb.AgentAddr, err)
	}
	c.Addr, c.Sandbox = host, spec.ID
	return nil
}

func (e *sandboxEngine) alive(ctx context.Context, c *container) (bool, error) {
	if c.Sandbox == "" {
		return false, nil
	}
	be, err := e.sandboxes()
	if err != nil {
		return false, err
	}
	st, err := be.State(ctx, c.Sandbox)
	if errors.Is(err, errdefs.ErrNotFound) {
		return false, nil
	}
	return st == backend.StateRunning, err
}

func (e *sandboxEngine) stop(ctx context.Context, c *container) error {
	if c.Sandbox == "" {
		return nil // it never booted
	}
	be, err := e.sandboxes()
	if err != nil {
		return err
	}
	return be.Stop(ctx, c.Sandbox)
}

func (e *sandboxEngine) stats(ctx context.Context, c *container) (*statsJSON, error) {
	be, err := e.sandboxes()
	if err != nil {
		return nil, err
	}
	sr, ok := be.(backend.StatsReader)
	if !ok {
		return nil, errors.New("the sandbox backend reports no stats")
	}
	s, err := sr.Stats(ctx, c.Sandbox)
	if err != nil {
		return nil, err
	}
	return &statsJSON{MemoryUsageBytes: s.MemoryUsageBytes, MemoryLimitBytes: s.MemoryLimitBytes, CPUUsageUsec: s.CPUUsageNanos / 1000, NumProcesses: s.Pids}, nil
}

func (e *sandboxEngine) close() {
	if c, ok := e.be.(io.Closer); ok {
		c.Close()
	}
	if e.store != nil {
		e.store.Close()
	}
}
