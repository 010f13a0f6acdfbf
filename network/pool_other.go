//go:build !linux

package network

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// Pool makes and removes sandbox network endpoints. Outside Linux it has
// nothing to make them with: every method fails with errdefs.ErrNotSupported.
type Pool struct{ cfg Config }

var errUnsupported = fmt.Errorf("network namespaces: unsupported on this OS: %w", errdefs.ErrNotSupported)

// New fails with errdefs.ErrNotSupported outside Linux.
func New(cfg Config) (*Pool, error) { return nil, errUnsupported }

// Subnet returns the subnet the pool hands out /30s from.
func (p *Pool) Subnet() netip.Prefix { return p.cfg.Subnet }

// NetNSPath returns where the namespace of sandbox id would be bind-mounted.
func (p *Pool) NetNSPath(id string) string { return filepath.Join(p.cfg.Dir, "netns", id) }

// Setup fails with errdefs.ErrNotSupported outside Linux.
func (p *Pool) Setup(ctx context.Context, id string, pol *netpolicy.Policy) (*Endpoint, error) {
	return nil, errUnsupported
}

// UpdatePolicy fails with errdefs.ErrNotSupported outside Linux.
func (p *Pool) UpdatePolicy(ctx context.Context, id string, pol *netpolicy.Policy) error {
	return errUnsupported
}

// Denials reports none outside Linux.
func (p *Pool) Denials(id string) []netpolicy.Denial { return nil }

// Teardown fails with errdefs.ErrNotSupported outside Linux.
func (p *Pool) Teardown(ctx context.Context, id string) error { return errUnsupported }

// Lookup fails with errdefs.ErrNotSupported outside Linux.
func (p *Pool) Lookup(id string) (*Endpoint, error) { return nil, errUnsupported }

// List fails with errdefs.ErrNotSupported outside Linux.
func (p *Pool) List(ctx context.Context) ([]string, error) { return nil, errUnsupported }
