package oci

import (
	"crypto/x509"
	"fmt"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

// Egress maps the operator's side of networking in a backend.Config onto
// the egress config of a backend that gives sandboxes their network from
// package network: nil when egress is off. ipv6 is "off" when the
// operator keeps sandboxes on IPv4, else empty ("auto").
func Egress(c backend.Config) (egress *network.EgressConfig, ipv6 string, err error) {
	if c.Network.NoIPv6 {
		ipv6 = "off"
	}
	if c.Network.NoEgress {
		return nil, ipv6, nil
	}
	egress = &network.EgressConfig{DNSUpstreams: c.Network.DNSUpstreams, Exempt: c.Network.Exempt, Secrets: c.Network.Secrets, Logger: c.Logger}
	if len(c.Network.UpstreamCAs) > 0 {
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(c.Network.UpstreamCAs) {
			return nil, "", fmt.Errorf("the upstream CA certificates hold no PEM certificate: %w", errdefs.ErrInvalidArgument)
		}
		egress.UpstreamRoots = roots
	}
	return egress, ipv6, nil
}
