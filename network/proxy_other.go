//go:build !linux

package network

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/lightbearco/tupper/errdefs"
)

// originalDst fails outside Linux, which has no SO_ORIGINAL_DST: the proxy
// works there only with an injected proxyConfig.OrigDst.
func originalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, fmt.Errorf("original destination: unsupported on this OS: %w", errdefs.ErrNotSupported)
}
