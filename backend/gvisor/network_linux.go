package gvisor

import (
	"context"
	"slices"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/network"
)

// trustCAEnv hands the agent the certificate of the egress CA, which it
// adds to the sandbox's trust store. It is Tupper's own variable: the
// agent removes it before starting any process.
const trustCAEnv = "TUPPER_TRUST_CA"

// withNetwork returns spec with what the agent needs to know of the
// sandbox's network: its resolver (the host side of the veth, where the
// egress DNS server answers), its own address for /etc/hosts, and the
// egress CA. spec is not modified.
func (b *Backend) withNetwork(spec *backend.Spec, ep *network.Endpoint) *backend.Spec {
	out := *spec
	out.Agent.Args = append(slices.Clone(spec.Agent.Args),
		"--nameserver", ep.HostAddr.Addr().String(),
		"--hosts-addr", ep.SandboxAddr.Addr().String())
	if b.egress != nil {
		out.Env = append(slices.Clone(spec.Env), trustCAEnv+"="+string(b.egress.CACertPEM()))
	}
	return &out
}

// UpdateNetwork implements backend.NetworkUpdater.
func (b *Backend) UpdateNetwork(ctx context.Context, id string, policy *netpolicy.Policy) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.locks.lock(id)()
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
