package oci

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/lightbearco/tupper/network"
)

// OpenNetwork makes a backend's address pool from nc and, when egress is
// set, the egress services (resolver, proxy, firewall) that enforce each
// sandbox's policy. Sandboxes get IPv6 from nc.IPv6Subnet, else from
// ipv6Default, when egress is on, ipv6 is not "off" and the host has an
// IPv6 route out. The caller closes the egress (nil when off).
func OpenNetwork(nc network.Config, egress *network.EgressConfig, ipv6 string, ipv6Default netip.Prefix) (*network.Pool, *network.Egress, error) {
	if egress != nil && ipv6 != "off" && !nc.IPv6Subnet.IsValid() && network.HostHasIPv6Route() {
		nc.IPv6Subnet = ipv6Default
	}
	if egress == nil || ipv6 == "off" {
		nc.IPv6Subnet = netip.Prefix{}
	}
	var eg *network.Egress
	if egress != nil {
		ecfg := *egress
		if ecfg.Dir == "" {
			ecfg.Dir = filepath.Join(nc.Dir, "egress")
		}
		if ecfg.IfPrefix == "" {
			ecfg.IfPrefix = nc.IfPrefix
		}
		if len(ecfg.Subnets) == 0 && nc.Subnet.IsValid() {
			ecfg.Subnets = []netip.Prefix{nc.Subnet}
		}
		if ecfg.Logger == nil {
			ecfg.Logger = nc.Logger
		}
		if err := os.MkdirAll(ecfg.Dir, 0o700); err != nil {
			return nil, nil, err
		}
		var err error
		if eg, err = network.NewEgress(ecfg); err != nil {
			return nil, nil, err
		}
		nc.Policy = eg
	}
	pool, err := network.New(nc)
	if err != nil {
		if eg != nil {
			eg.Close()
		}
		return nil, nil, fmt.Errorf("network: %w", err)
	}
	return pool, eg, nil
}
