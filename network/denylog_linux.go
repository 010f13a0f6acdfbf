package network

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/errdefs"
)

// The NFLOG part of nfnetlink (linux/netfilter/nfnetlink_log.h). x/sys
// does not carry these.
const (
	nfnlSubsysULOG = 4

	nfulnlMsgPacket = 0
	nfulnlMsgConfig = 1

	nfulaCfgCmd     = 1
	nfulaCfgMode    = 2
	nfulaCfgQThresh = 5

	nfulnlCfgCmdBind = 1
	nfulnlCopyPacket = 2

	nfulaPayload = 9
	nfulaPrefix  = 10

	nlaTypeMask = 0x3fff // strips NLA_F_NESTED and NLA_F_NET_BYTEORDER
)

// denyLogCopy is how much of a denied packet the kernel hands over: enough
// for an IPv6 header with a few extension headers and the ports.
const denyLogCopy = 128

// logGroupFor returns the NFLOG group the daemon whose pool lives in dir
// logs denials to: a stable hash of dir in 32768..65535, so that two
// daemons on one host (each group has at most one listener) almost never
// collide, and neither meets the low groups other tools use.
func logGroupFor(dir string) uint16 {
	h := fnv.New32a()
	h.Write([]byte(filepath.Clean(dir)))
	return 1<<15 | uint16(h.Sum32()%(1<<15))
}

// listenDenials subscribes to NFLOG group and calls onDenial for each
// packet that a sandbox's firewall denied and logged (see
// applySandboxFirewall): the host side interface of the sandbox, the index
// of the rule in the names applySandboxFirewall returned, the protocol
// ("tcp", "udp", "icmp", "icmpv6" or the IP protocol number) and the
// destination (port 0 for protocols without ports). Packets of other
// prefixes are ignored.
//
// onDenial is called from a single goroutine, one packet at a time; it
// should be quick, since the kernel drops what does not fit in the
// socket's buffer. The listener runs until stop is called or ctx is done;
// stop waits for the last onDenial to return and may be called more than
// once.
//
// Only one listener may hold a group on the host: a second one fails with
// an errdefs.ErrAlreadyExists error. A kernel without NFLOG (nfnetlink_log)
// gives an errdefs.ErrNotSupported error.
func listenDenials(ctx context.Context, group uint16, onDenial func(hostIf string, ruleIdx int, proto string, dst netip.AddrPort)) (stop func(), err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrNotSupported)
		}
		return nil, fmt.Errorf("denial log: nfnetlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("denial log: bind: %w", err)
	}
	// The descriptor is non-blocking, so the file goes through Go's
	// poller and Close wakes a pending Read.
	f := os.NewFile(uintptr(fd), "nflog")
	if err := nflogConfigure(ctx, f, group); err != nil {
		f.Close()
		return nil, err
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1<<16)
		for {
			n, err := f.Read(buf)
			if err != nil {
				if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EINTR) {
					continue // the kernel dropped some denials; go on
				}
				return
			}
			forEachNFLOG(buf[:n], func(prefix string, payload []byte) {
				hostIf, idx, ok := parseDenyPrefix(prefix)
				if !ok {
					return
				}
				proto, dst, ok := parsePacketDst(payload)
				if !ok {
					return
				}
				onDenial(hostIf, idx, proto, dst)
			})
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() { f.Close() })
		<-done
	}
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				once.Do(func() { f.Close() })
			case <-done:
			}
		}()
	}
	return stop, nil
}

// nflogConfigure binds the socket to group, asks for packet contents and
// for each packet to be sent at once rather than batched.
func nflogConfigure(ctx context.Context, f *os.File, group uint16) error {
	mode := make([]byte, 6) // struct nfulnl_msg_config_mode, packed
	binary.BigEndian.PutUint32(mode, denyLogCopy)
	mode[4] = nfulnlCopyPacket
	qthresh := binary.BigEndian.AppendUint32(nil, 1)
	steps := []struct {
		what string
		attr []byte
	}{
		{"bind", nlAttr(nfulaCfgCmd, []byte{nfulnlCfgCmdBind})},
		{"mode", nlAttr(nfulaCfgMode, mode)},
		{"queue threshold", nlAttr(nfulaCfgQThresh, qthresh)},
	}
	for i, s := range steps {
		if err := nflogRequest(ctx, f, uint32(i+1), group, s.attr); err != nil {
			switch {
			case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EPERM) && hasNetAdmin():
				// The kernel answers EPERM, not EBUSY, to a bind of a
				// group that another socket holds.
				err = fmt.Errorf("%w: group %d has another listener: %w", err, group, errdefs.ErrAlreadyExists)
			case errors.Is(err, unix.EPERM):
				err = fmt.Errorf("%w: NFLOG needs CAP_NET_ADMIN: %w", err, errdefs.ErrPermissionDenied)
			case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EPROTONOSUPPORT),
				// nfnetlink answers EINVAL for a subsystem it does not have.
				i == 0 && errors.Is(err, unix.EINVAL):
				err = fmt.Errorf("%w: the kernel has no NFLOG (nfnetlink_log): %w", err, errdefs.ErrNotSupported)
			}
			return fmt.Errorf("denial log: %s group %d: %w", s.what, group, err)
		}
	}
	return nil
}

// hasNetAdmin reports whether the process may administer the network,
// which binding an NFLOG group needs.
func hasNetAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_NET_ADMIN/32].Effective&(1<<(unix.CAP_NET_ADMIN%32)) != 0
}

// nflogRequest sends one NFULNL_MSG_CONFIG request for group with attr
// and waits for the kernel's acknowledgement.
func nflogRequest(ctx context.Context, f *os.File, seq uint32, group uint16, attr []byte) error {
	msg := make([]byte, unix.NLMSG_HDRLEN+4, unix.NLMSG_HDRLEN+4+len(attr))
	msg = append(msg, attr...)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], nfnlSubsysULOG<<8|nfulnlMsgConfig)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], seq)
	// struct nfgenmsg: family, version, resource id (the group, big endian).
	msg[16] = unix.AF_UNSPEC
	msg[17] = unix.NFNETLINK_V0
	binary.BigEndian.PutUint16(msg[18:], group)
	if _, err := f.Write(msg); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		f.SetReadDeadline(d)
		defer f.SetReadDeadline(time.Time{})
	}
	buf := make([]byte, 8192)
	for {
		n, err := f.Read(buf)
		if err != nil {
			return err
		}
		for b := buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			l := int(binary.NativeEndian.Uint32(b[0:]))
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				break
			}
			typ := binary.NativeEndian.Uint16(b[4:])
			mseq := binary.NativeEndian.Uint32(b[8:])
			if typ == unix.NLMSG_ERROR && mseq == seq && l >= unix.NLMSG_HDRLEN+4 {
				if errno := int32(binary.NativeEndian.Uint32(b[unix.NLMSG_HDRLEN:])); errno != 0 {
					return unix.Errno(-errno)
				}
				return nil
			}
			b = b[nlAlign(l):]
		}
	}
}

// nlAttr encodes one netlink attribute, padded.
func nlAttr(typ uint16, data []byte) []byte {
	b := make([]byte, 4, nlAlign(4+len(data)))
	binary.NativeEndian.PutUint16(b[0:], uint16(4+len(data)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

// forEachNFLOG calls f with the prefix and the packet of each
// NFULNL_MSG_PACKET message in buf; it skips anything else and stops at
// the first malformed message.
func forEachNFLOG(buf []byte, f func(prefix string, payload []byte)) {
	for len(buf) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(buf[0:]))
		if l < unix.NLMSG_HDRLEN || l > len(buf) {
			return
		}
		typ := binary.NativeEndian.Uint16(buf[4:])
		if typ == nfnlSubsysULOG<<8|nfulnlMsgPacket && l >= unix.NLMSG_HDRLEN+4 {
			var prefix string
			var payload []byte
			for a := buf[unix.NLMSG_HDRLEN+4 : l]; len(a) >= 4; {
				al := int(binary.NativeEndian.Uint16(a[0:]))
				at := binary.NativeEndian.Uint16(a[2:]) & nlaTypeMask
				if al < 4 || al > len(a) {
					break
				}
				switch at {
				case nfulaPrefix:
					prefix = strings.TrimRight(string(a[4:al]), "\x00")
				case nfulaPayload:
					payload = a[4:al]
				}
				a = a[min(nlAlign(al), len(a)):]
			}
			f(prefix, payload)
		}
		buf = buf[min(nlAlign(l), len(buf)):]
	}
}

// parseDenyPrefix parses "tpd <hostIf> <rule>", the prefix
// applySandboxFirewall logs denials with.
func parseDenyPrefix(prefix string) (hostIf string, idx int, ok bool) {
	f := strings.Fields(prefix)
	if len(f) != 3 || f[0] != denyLogPrefix || !hostIfPattern.MatchString(f[1]) {
		return "", 0, false
	}
	idx, err := strconv.Atoi(f[2])
	if err != nil || idx < 0 {
		return "", 0, false
	}
	return f[1], idx, true
}

// parsePacketDst returns the protocol and destination of an IPv4 or IPv6
// packet; the port is 0 when the protocol has none or the packet is a
// later fragment or cut short.
func parsePacketDst(p []byte) (proto string, dst netip.AddrPort, ok bool) {
	if len(p) < 1 {
		return "", netip.AddrPort{}, false
	}
	var (
		addr netip.Addr
		next byte
		l4   []byte
	)
	switch p[0] >> 4 {
	case 4:
		if len(p) < 20 {
			return "", netip.AddrPort{}, false
		}
		ihl := int(p[0]&0x0f) * 4
		addr = netip.AddrFrom4([4]byte(p[16:20]))
		next = p[9]
		if binary.BigEndian.Uint16(p[6:])&0x1fff == 0 && ihl >= 20 && ihl <= len(p) {
			l4 = p[ihl:]
		}
	case 6:
		if len(p) < 40 {
			return "", netip.AddrPort{}, false
		}
		addr = netip.AddrFrom16([16]byte(p[24:40]))
		next = p[6]
		rest := p[40:]
	ext:
		for {
			switch next {
			case 0, 43, 60: // hop-by-hop, routing, destination options
				if len(rest) < 8 {
					rest = nil
					break ext
				}
				n := 8 + int(rest[1])*8
				if n > len(rest) {
					rest = nil
					break ext
				}
				next, rest = rest[0], rest[n:]
			case 44: // fragment
				if len(rest) < 8 {
					rest = nil
					break ext
				}
				first := binary.BigEndian.Uint16(rest[2:])&0xfff8 == 0
				next, rest = rest[0], rest[8:]
				if !first {
					rest = nil
					break ext
				}
			default:
				break ext
			}
		}
		l4 = rest
	default:
		return "", netip.AddrPort{}, false
	}
	var port uint16
	switch next {
	case unix.IPPROTO_TCP:
		proto = "tcp"
	case unix.IPPROTO_UDP:
		proto = "udp"
	case unix.IPPROTO_ICMP:
		proto = "icmp"
	case unix.IPPROTO_ICMPV6:
		proto = "icmpv6"
	default:
		proto = strconv.Itoa(int(next))
	}
	if (next == unix.IPPROTO_TCP || next == unix.IPPROTO_UDP) && len(l4) >= 4 {
		port = binary.BigEndian.Uint16(l4[2:])
	}
	return proto, netip.AddrPortFrom(addr, port), true
}
