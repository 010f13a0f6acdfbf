package network

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"

	"github.com/lightbearco/tupper/errdefs"
)

// EgressConfig configures an Egress.
type EgressConfig struct {
	// Dir keeps the egress CA (ca.pem, ca-key.pem) across restarts.
	// Required.
	Dir string
	// IfPrefix starts the names of the pool's host-side interfaces;
	// empty means DefaultIfPrefix.
	IfPrefix string
	// Subnets are the pools' address ranges, which no sandbox reaches;
	// empty means DefaultSubnet.
	Subnets []netip.Prefix
	// DNSUpstreams are the resolvers ("host:port") the sandboxes'
	// lookups are forwarded to; empty means the host's own, from
	// /etc/resolv.conf.
	DNSUpstreams []string
	// Exempt lists destinations that the operator opens to sandboxes
	// although netpolicy.AlwaysDenied or the host's own networks hold
	// them (an internal package mirror, say). A sandbox's own policy
	// still applies to them.
	Exempt []netip.Prefix
	// UpstreamRoots verifies the servers that the egress proxy connects
	// to when it adds headers; nil means the host's system roots.
	UpstreamRoots *x509.CertPool
	// Secrets resolves the secrets that rules' headers use, as the proxy
	// sends each request; nil means none resolves, and a request whose
	// rules use one fails with 502 rather than go out without it.
	Secrets SecretResolver
	// LogGroup is the NFLOG group that reports refused flows; zero
	// means one derived from Dir.
	LogGroup uint16
	// Logger receives the logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate reports whether c can make an Egress.
func (c *EgressConfig) Validate() error {
	if c.Dir == "" || !filepath.IsAbs(c.Dir) {
		return fmt.Errorf("egress config: Dir %q must be an absolute path: %w", c.Dir, errdefs.ErrInvalidArgument)
	}
	if c.IfPrefix != "" && !ifPrefixPattern.MatchString(c.IfPrefix) {
		return fmt.Errorf("egress config: IfPrefix %q must be 1 to 3 characters of [a-z0-9]: %w", c.IfPrefix, errdefs.ErrInvalidArgument)
	}
	return nil
}
