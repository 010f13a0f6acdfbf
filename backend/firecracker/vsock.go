package firecracker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// handshakeTimeout bounds a vsock handshake when ctx has no sooner
// deadline: a VMM or agent that takes the connection but never answers
// must not hang the caller.
const handshakeTimeout = 10 * time.Second

// maxHandshakeLine bounds an answer line; Firecracker's is "OK <port>".
const maxHandshakeLine = 64

// dialVsock connects to port of the guest through Firecracker's vsock
// unix socket uds: it sends "CONNECT <port>\n" and reads "OK <host
// port>\n", after which the connection is the guest's. Firecracker closes
// the connection without an answer when nothing in the guest listens on
// port; that is ECONNREFUSED, as a TCP peer's reset would be.
func dialVsock(ctx context.Context, uds string, port uint32) (net.Conn, error) {
	c, err := dialUnix(ctx, uds)
	if err != nil {
		return nil, err
	}
	line, err := handshake(ctx, c, "CONNECT "+strconv.FormatUint(uint64(port), 10)+"\n")
	if err != nil {
		c.Close()
		return nil, vsockError(uds, port, err)
	}
	if hp, ok := strings.CutPrefix(line, "OK "); !ok || !isPort(hp) {
		c.Close()
		return nil, vsockError(uds, port, fmt.Errorf("unexpected answer %q to CONNECT", line))
	}
	return c, nil
}

// dialGuest connects to TCP port of the guest: the agent's own port is a
// vsock port of its own; any other goes through the agent's forwarding
// port, whose answer to "CONNECT <port>\n" is "OK\n" or "ERR <reason>\n".
func dialGuest(ctx context.Context, uds string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: not a TCP port", port)
	}
	if port == AgentVsockPort {
		return dialVsock(ctx, uds, AgentVsockPort)
	}
	c, err := dialVsock(ctx, uds, ForwardVsockPort)
	if err != nil {
		return nil, err
	}
	line, err := handshake(ctx, c, "CONNECT "+strconv.Itoa(port)+"\n")
	switch {
	case err != nil:
		err = fmt.Errorf("forwarding to port %d: %w", port, err)
	case line == "OK":
		return c, nil
	case line == "ERR refused":
		err = &net.OpError{Op: "dial", Net: "vsock", Addr: vsockAddr{uds, uint32(port)}, Err: syscall.ECONNREFUSED}
	case strings.HasPrefix(line, "ERR "):
		err = fmt.Errorf("forwarding to port %d: the agent says: %s", port, strings.TrimPrefix(line, "ERR "))
	default:
		err = fmt.Errorf("forwarding to port %d: unexpected answer %q", port, line)
	}
	c.Close()
	return nil, err
}

// handshake writes req on c and reads one answer line, without the line
// end, within ctx's deadline or handshakeTimeout. It reads one byte at a
// time: whatever follows the line belongs to the connection's user.
func handshake(ctx context.Context, c net.Conn, req string) (string, error) {
	deadline := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	// ctx's cancellation (not only its deadline) ends the wait too.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := io.WriteString(c, req); err != nil {
		return "", ctxErr(ctx, err)
	}
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := c.Read(b); err != nil {
			switch {
			case errors.Is(err, io.EOF) && len(line) == 0:
				return "", &net.OpError{Op: "dial", Net: "vsock", Err: syscall.ECONNREFUSED}
			case errors.Is(err, io.EOF):
				return "", fmt.Errorf("the answer %q was cut short", line)
			}
			return "", ctxErr(ctx, err)
		}
		if b[0] == '\n' {
			break
		}
		if len(line) == maxHandshakeLine {
			return "", fmt.Errorf("answer longer than %d bytes: %q…", maxHandshakeLine, line)
		}
		line = append(line, b[0])
	}
	if !stop() {
		// ctx ended just as the answer came: the deadline may be set.
		return "", ctxErr(ctx, context.Cause(ctx))
	}
	c.SetDeadline(time.Time{})
	return strings.TrimSuffix(string(line), "\r"), nil
}

// ctxErr prefers ctx's error to the I/O error that its end caused: the
// connection's deadline is ctx's, and may pass a moment before ctx says so.
func ctxErr(ctx context.Context, err error) error {
	if cerr := context.Cause(ctx); cerr != nil {
		return cerr
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) && errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

func vsockError(uds string, port uint32, err error) error {
	return fmt.Errorf("vsock %s port %d: %w", uds, port, err)
}

func isPort(s string) bool {
	n, err := strconv.ParseUint(s, 10, 32)
	return err == nil && n > 0
}

// vsockAddr names a port of a guest behind a vsock unix socket.
type vsockAddr struct {
	uds  string
	port uint32
}

func (a vsockAddr) Network() string { return "vsock" }
func (a vsockAddr) String() string  { return a.uds + ":" + strconv.FormatUint(uint64(a.port), 10) }
