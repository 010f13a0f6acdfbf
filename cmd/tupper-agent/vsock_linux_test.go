package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSocketListener drives the listener the vsock ports use, bound to a
// unix socket (the machine has no vsock peer to test with): an HTTP server
// and the forwarding port over it, half closes, deadlines, and Close.
func TestSocketListener(t *testing.T) {
	path := t.TempDir() + "/agent.sock"
	ln, err := listenSocket(unix.AF_UNIX, &unix.SockaddrUnix{Name: path})
	if err != nil {
		t.Fatal(err)
	}
	if got := ln.Addr().String(); got != path {
		t.Errorf("Addr = %q, want %q", got, path)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hi from "+r.URL.Path)
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	tr := &http.Transport{Dial: func(_, _ string) (net.Conn, error) { return net.Dial("unix", path) }}
	defer tr.CloseIdleConnections()
	for i := range 3 { // kept-alive connections too
		res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://agent/health")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(body) != "hi from /health" {
			t.Errorf("request %d: %q", i, body)
		}
	}

	// A connection's half close and deadline, on the accepting side.
	raw, err := listenSocket(unix.AF_UNIX, &unix.SockaddrUnix{Name: t.TempDir() + "/raw.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	go func() {
		c, err := net.Dial("unix", raw.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(io.Discard, c) // until the agent's side half-closes
		io.WriteString(c, "after")
	}()
	c, err := raw.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(c); err != nil || string(got) != "after" {
		t.Errorf("read after the half close: %q, %v", got, err)
	}

	// Close ends Serve and a blocked Accept.
	srv.Close()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve after Close: %v", err)
	}
	accepted := make(chan error, 1)
	go func() {
		_, err := raw.Accept()
		accepted <- err
	}()
	time.Sleep(20 * time.Millisecond)
	raw.Close()
	select {
	case err := <-accepted:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept still blocked 10s after Close")
	}
}

// TestListenVsock binds a vsock port where the machine has vsock, and
// checks the address it reports; without vsock it checks the error.
func TestListenVsock(t *testing.T) {
	ln, err := listenVsock(49990)
	if err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EADDRNOTAVAIL) {
			t.Skipf("no vsock here: %v", err)
		}
		t.Fatal(err)
	}
	defer ln.Close()
	if a := ln.Addr(); a.Network() != "vsock" || !strings.HasSuffix(a.String(), ":49990") {
		t.Errorf("Addr = %s %s", a.Network(), a)
	}
}
