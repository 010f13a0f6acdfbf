//go:build !linux

package network

import (
	"context"
	"net/netip"
)

// InspectHostFirewalls finds none outside Linux: sandboxes there get no
// network of this package's.
func InspectHostFirewalls(ctx context.Context, prefixes []string, subnets []netip.Prefix) []HostFirewall {
	return nil
}

// HostCleanup fails with errdefs.ErrNotSupported outside Linux.
func HostCleanup(ctx context.Context, leaveFirewalls bool) (*CleanupReport, error) {
	return nil, errUnsupported
}

// Close does nothing outside Linux, where New makes no pool.
func (p *Pool) Close(ctx context.Context) (*CleanupReport, error) { return &CleanupReport{}, nil }

// HostLeftovers finds none outside Linux.
func HostLeftovers(ctx context.Context) (left []string, inUse bool, err error) {
	return nil, false, nil
}
