package main

import (
	"net"
	"testing"
	"time"
)

// TestLimitInside checks the cap on connections from inside the sandbox:
// past it a new one is closed at once, closing one makes room, and the
// cap never holds connections from elsewhere (the daemon's).
func TestLimitInside(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := limitInside(raw, 2).(*insideLimit)
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// closedSoon reports whether the agent's side closed c.
	closedSoon := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !isTimeout(err)
	}
	a, b := dial(), dial()
	first, second := <-accepted, <-accepted
	third := dial()
	if !closedSoon(third) {
		t.Fatal("a third connection from inside was kept past a cap of 2")
	}
	first.Close()
	fourth := dial()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("a connection was refused after one of the two closed")
	}
	for _, c := range []net.Conn{a, b, second, fourth} {
		c.Close()
	}

	// The daemon's address is not inside.
	if ln.inside(&net.TCPAddr{IP: net.ParseIP("203.0.113.1")}) {
		t.Error("an outside address counts as inside")
	}
	if !ln.inside(&net.TCPAddr{IP: net.ParseIP("127.0.0.1")}) || !ln.inside(&net.TCPAddr{IP: net.ParseIP("::1")}) {
		t.Error("loopback does not count as inside")
	}
	if limitInside(raw, 0) != raw {
		t.Error("a cap of 0 wrapped the listener")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
