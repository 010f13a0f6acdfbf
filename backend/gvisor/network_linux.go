package gvisor

import (
	"context"
	"slices"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/network"
)

// withNetwork returns spec with what the agent needs to know of the
// sandbox's network, in the variables of backend.NetworkEnv: its resolver
// (the host side of the veth, where the egress DNS server answers), its
// own address for /etc/hosts, and the egress CA. An agent that knows none
// of them ignores them. spec is not modified.
func (b *Backend) withNetwork(spec *backend.Spec, ep *network.Endpoint) *backend.Spec {
	out := *spec
	out.Env = append(slices.Clone(spec.Env),
		backend.EnvNameserver+"="+ep.HostAddr.Addr().String(),
		backend.EnvSandboxAddr+"="+ep.SandboxAddr.Addr().String())
	if b.egress != nil {
		out.Env = append(out.Env, backend.EnvTrustCA+"="+string(b.egress.CACertPEM()))
	}
	return &out
}

// Close stops the backend's egress services (the sandboxes' resolver and
// egress proxy). Sandboxes keep running; their lookups and proxied
// connections fail at once until a new Backend on the same Root serves
// them again.
func (b *Backend) Close() error {
	if b.egress == nil {
		return nil
	}
	return b.egress.Close()
}

// UpdateNetwork implements backend.NetworkUpdater.
func (b *Backend) UpdateNetwork(ctx context.Context, id string, policy *netpolicy.Policy) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.locks.Lock(id)()
	return b.pool.UpdatePolicy(ctx, id, policy)
}

// NetworkDenials implements backend.NetworkObserver.
func (b *Backend) NetworkDenials(ctx context.Context, id string) ([]netpolicy.Denial, error) {
	if err := network.ValidateID(id); err != nil {
		return nil, err
	}
	if _, err := b.pool.Lookup(id); err != nil {
		return nil, err
	}
	return b.pool.Denials(id), nil
}

var (
	_ backend.NetworkUpdater  = (*Backend)(nil)
	_ backend.NetworkObserver = (*Backend)(nil)
)
