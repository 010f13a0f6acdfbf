package template

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/netpolicy"
)

// A build whose base is not in the image store pulls it. The pull is the
// daemon's own request, made from the host for whichever client asked for
// the build: unguarded, a base named "127.0.0.1:8080/x" or "10.0.0.5/x"
// would have the daemon call the host's own services and its private
// network (which no sandbox reaches) and show what they answered in the
// build's log, and a private image of a registry the operator's Docker
// config has credentials for would be pulled with them. So a build pulls
// with no credentials and no proxy, and connects only to public
// addresses. Images from anywhere else are the operator's to add, with
// `tupper image pull`.

// pullOptions are the options of a build's pull of its base.
func pullOptions() image.PullOptions {
	return image.PullOptions{Transport: publicTransport, Anonymous: true}
}

// publicTransport carries builds' pulls; it dials public addresses only
// (see checkPublicDial).
var publicTransport http.RoundTripper = func() http.RoundTripper {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: checkPublicDial}
	t.DialContext = d.DialContext
	return t
}()

// checkPublicDial refuses a connection to an address that is not public:
// those no sandbox reaches whatever its policy (netpolicy.AlwaysDenied:
// loopback, private, link-local and metadata, reserved), and the host's
// own. It runs on the address each connection is made to, after name
// resolution, so that neither a name that resolves to such an address,
// nor one whose address changes between lookups, nor a registry's
// redirect gets around it.
func checkPublicDial(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, err)
	}
	if ip := ap.Addr().Unmap(); !publicAddr(ip, hostAddrs()) {
		return fmt.Errorf("%s is not a public address: a template's base is pulled from public registries only (add other images with `tupper image pull`): %w", ip, errdefs.ErrPermissionDenied)
	}
	return nil
}

// publicAddr reports whether ip is outside netpolicy.AlwaysDenied and is
// none of host, the host's own addresses.
func publicAddr(ip netip.Addr, host []netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	for _, p := range netpolicy.AlwaysDenied() {
		if p.Contains(ip) {
			return false
		}
	}
	for _, h := range host {
		if h == ip {
			return false
		}
	}
	return true
}

// hostAddrs are the addresses of the host's interfaces (none when they
// cannot be listed: the denied ranges still hold).
func hostAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, pfx.Addr().Unmap().WithZone(""))
		}
	}
	return out
}
