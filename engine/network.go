package engine

import (
	"context"
	"fmt"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// UpdateNetwork replaces sandbox id's egress policy with policy and
// internet (see CreateOptions.Network), in force and in its record; open
// connections that the new policy denies are cut. It fails with
// errdefs.ErrNotSupported when the backend cannot change a running
// sandbox's policy.
func (e *Engine) UpdateNetwork(ctx context.Context, id string, policy *netpolicy.Policy, internet *bool) (*Sandbox, error) {
	policy = policy.Clone()
	if err := policy.Normalize(); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := e.checkScope(ctx, id); err != nil {
		return nil, err
	}
	if err := e.bindSandboxSecrets(ctx, id, policy); err != nil {
		return nil, err
	}
	l, err := e.liveOf(id)
	if err != nil {
		return nil, err
	}
	up, ok := l.be.(backend.NetworkUpdater)
	if !ok {
		return nil, fmt.Errorf("sandbox %q: the %s backend cannot change a running sandbox's network: %w", id, l.beName, errdefs.ErrNotSupported)
	}
	// The record is read, the backend updated and the record written in
	// one step of the sandbox's record writes, so that neither this nor a
	// concurrent SetTimeout undoes the other, and only while the sandbox
	// lives: a kill that comes in between is not undone either.
	sb, err := e.updateRecord(ctx, id, func(sb *Sandbox) error {
		if sb.Network != nil {
			// Who may reach the sandbox's ports is not egress: an update
			// of egress keeps it, whatever face the update came through.
			if policy == nil {
				policy = &netpolicy.Policy{}
			}
			policy.AllowPublicTraffic, policy.MaskRequestHost = sb.Network.AllowPublicTraffic, sb.Network.MaskRequestHost
		}
		if err := up.UpdateNetwork(ctx, id, netpolicy.WithInternet(policy, internet)); err != nil {
			return fmt.Errorf("sandbox %q: update network: %w", id, err)
		}
		sb.Network, sb.AllowInternetAccess = policy, internet
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	e.log.Info("network policy updated", "sandbox", id, "network", policy.Redact(), "allowInternetAccess", internet)
	return sb, nil
}

// NetworkDenials returns the recent connections and lookups of sandbox id
// that its policy refused, oldest first. A backend that keeps no record
// reports none.
func (e *Engine) NetworkDenials(ctx context.Context, id string) ([]netpolicy.Denial, error) {
	if _, err := e.Get(ctx, id); err != nil {
		return nil, err
	}
	l, err := e.liveOf(id)
	if err != nil {
		return nil, err
	}
	obs, ok := l.be.(backend.NetworkObserver)
	if !ok {
		return nil, nil
	}
	return obs.NetworkDenials(ctx, id)
}
