package sdk

import (
	"context"
	"fmt"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// NetworkPolicy is a sandbox's egress policy, E2B's `network` option (see
// package netpolicy for the rules).
type NetworkPolicy = netpolicy.Policy

// NetworkRule is one transform of requests to a domain; NetworkTransform
// says which headers it sets.
type (
	NetworkRule      = netpolicy.Rule
	NetworkTransform = netpolicy.Transform
)

// NetworkDenial is a connection or lookup that a sandbox's policy refused.
type NetworkDenial = netpolicy.Denial

// DenyAllTraffic is the DenyOut entry that blocks all egress.
const DenyAllTraffic = netpolicy.AllTrafficV4

// SetNetwork replaces the sandbox's egress policy at once, as E2B's
// updateNetwork does: fields left out are cleared, and open connections
// the new policy denies are cut. allowInternetAccess false denies all
// egress but what policy's AllowOut names; nil leaves policy alone.
func (s *Sandbox) SetNetwork(ctx context.Context, policy *NetworkPolicy, allowInternetAccess *bool) error {
	nt, err := s.networkTransport()
	if err != nil {
		return err
	}
	if err := nt.UpdateNetwork(ctx, s.info.SandboxID, policy.Clone(), allowInternetAccess); err != nil {
		return fmt.Errorf("sandbox %q: set network: %w", s.info.SandboxID, err)
	}
	return nil
}

// NetworkDenials returns the sandbox's recent connections and lookups that
// its policy refused, oldest first: what to look at when `pip install`
// fails.
func (s *Sandbox) NetworkDenials(ctx context.Context) ([]NetworkDenial, error) {
	nt, err := s.networkTransport()
	if err != nil {
		return nil, err
	}
	list, err := nt.NetworkDenials(ctx, s.info.SandboxID)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: network denials: %w", s.info.SandboxID, err)
	}
	return list, nil
}

func (s *Sandbox) networkTransport() (NetworkTransport, error) {
	t, err := s.client.transport()
	if err != nil {
		return nil, err
	}
	nt, ok := t.(NetworkTransport)
	if !ok {
		return nil, fmt.Errorf("sandbox %q: this transport cannot change networks: %w", s.info.SandboxID, errdefs.ErrNotSupported)
	}
	return nt, nil
}
