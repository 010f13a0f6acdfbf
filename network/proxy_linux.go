package network

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// originalDst returns where c was headed before the firewall's DNAT sent
// it to the proxy, from the kernel's connection tracking
// (SO_ORIGINAL_DST). c must be an accepted IPv4 TCP connection.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T is not a TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	var (
		mreq   *unix.IPv6Mreq
		optErr error
	)
	// SO_ORIGINAL_DST fills a struct sockaddr_in (16 bytes); IPv6Mreq is
	// a 16-byte buffer that x/sys can fetch without unsafe.
	err = raw.Control(func(fd uintptr) {
		mreq, optErr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	})
	if err == nil {
		err = optErr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: getsockopt SO_ORIGINAL_DST: %w", err)
	}
	b := mreq.Multiaddr
	if family := binary.NativeEndian.Uint16(b[0:2]); family != unix.AF_INET {
		return netip.AddrPort{}, fmt.Errorf("original destination: address family %d, want AF_INET", family)
	}
	port := binary.BigEndian.Uint16(b[2:4])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
}
