package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The forwarding port is how the host reaches a TCP port of the sandbox
// (a user's server, the code interpreter) when all it has is the vsock of
// a microVM. The host connects to the agent's forwarding listener and
// writes one line, "CONNECT <port>\n"; the agent dials that port on the
// sandbox's loopback and answers "OK\n", then relays bytes both ways until
// both sides are done; or it answers "ERR refused\n" when nothing listens
// there, "ERR <reason>\n" for any other failure, and closes.
const (
	forwardRequestTimeout = 10 * time.Second
	forwardDialTimeout    = 10 * time.Second
	forwardMaxLine        = 32
)

// serveForward answers forwarding requests on ln until ln is closed.
func serveForward(ln net.Listener, log *slog.Logger) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and its kind pass; wait a little rather than spin.
			log.Warn("forwarding port: accept", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go forward(c, log)
	}
}

// forward serves one forwarding request on c and owns c.
func forward(c net.Conn, log *slog.Logger) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(forwardRequestTimeout))
	port, err := readForwardRequest(c)
	if err != nil {
		fmt.Fprintf(c, "ERR %s\n", oneLine(err.Error()))
		// Closing with unread bytes would reset the connection and lose
		// the answer: let the host see it, and take what it still sends.
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
			io.Copy(io.Discard, io.LimitReader(c, 4096))
		}
		return
	}
	c.SetReadDeadline(time.Time{})
	up, err := dialLoopback(port)
	if err != nil {
		reason := oneLine(err.Error())
		if errors.Is(err, syscall.ECONNREFUSED) {
			reason = "refused"
		}
		fmt.Fprintf(c, "ERR %s\n", reason)
		return
	}
	defer up.Close()
	if _, err := io.WriteString(c, "OK\n"); err != nil {
		return
	}
	relay(c, up)
}

// readForwardRequest reads "CONNECT <port>\n" one byte at a time, so that
// nothing the host sends after it is taken from the relay.
func readForwardRequest(r io.Reader) (int, error) {
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := io.ReadFull(r, b); err != nil {
			return 0, fmt.Errorf("reading the request: %w", err)
		}
		if b[0] == '\n' {
			break
		}
		if len(line) == forwardMaxLine {
			return 0, errors.New("request line too long")
		}
		line = append(line, b[0])
	}
	p, ok := strings.CutPrefix(strings.TrimSuffix(string(line), "\r"), "CONNECT ")
	if !ok {
		return 0, fmt.Errorf("malformed request %q: want CONNECT <port>", line)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return 0, fmt.Errorf("bad port %q", p)
	}
	return port, nil
}

// dialLoopback connects to port on the sandbox's IPv4 loopback, or its IPv6
// one when only that answers.
func dialLoopback(port int) (net.Conn, error) {
	d := net.Dialer{Timeout: forwardDialTimeout}
	c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err == nil {
		return c, nil
	}
	if c6, err6 := d.Dial("tcp", net.JoinHostPort("::1", strconv.Itoa(port))); err6 == nil {
		return c6, nil
	}
	return nil, err
}

// relay copies a to b and b to a; a side that ends its sending has its
// peer's sending half shut, so that half-closed protocols work. It
// returns once both directions are done.
func relay(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
