package main

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// echoServer serves on a loopback port: it sends back what it reads, and
// "bye" once the client stops sending.
func echoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				io.WriteString(c, "bye")
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// forwarder serves forwarding requests on a unix socket and returns its
// path.
func forwarder(t *testing.T) string {
	t.Helper()
	path := t.TempDir() + "/fwd.sock"
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveForward(ln, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("serveForward after Close: %v, want nil", err)
		}
	})
	return path
}

func TestForward(t *testing.T) {
	port := echoServer(t)
	fwd := forwarder(t)

	c, err := net.Dial("unix", fwd)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// The request and the first bytes in one write: nothing after the
	// request line may be lost.
	if _, err := io.WriteString(c, "CONNECT "+strconv.Itoa(port)+"\nhello"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "OK\n" {
		t.Fatalf("answer %q, %v; want OK", line, err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo %q, %v", buf, err)
	}
	// Half close: the server sees the end and still answers.
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "bye" {
		t.Errorf("after the half close: %q, %v; want bye", rest, err)
	}
}

func TestForwardErrors(t *testing.T) {
	fwd := forwarder(t)
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	tests := []struct {
		name    string
		request string
		want    string
	}{
		{name: "refused", request: "CONNECT " + strconv.Itoa(closed) + "\n", want: "ERR refused\n"},
		{name: "no CONNECT", request: "HELLO 80\n", want: "ERR malformed request"},
		{name: "port zero", request: "CONNECT 0\n", want: "ERR bad port"},
		{name: "port too big", request: "CONNECT 65536\n", want: "ERR bad port"},
		{name: "not a number", request: "CONNECT http\n", want: "ERR bad port"},
		{name: "line too long", request: "CONNECT " + strings.Repeat("1", 40) + "\n", want: "ERR request line too long"},
		{name: "end before the line", request: "CONNECT 80", want: "ERR reading the request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("unix", fwd)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, tt.request)
			c.(*net.UnixConn).CloseWrite()
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(got), tt.want) || !strings.HasSuffix(string(got), "\n") {
				t.Errorf("answer %q, want it to start with %q", got, tt.want)
			}
		})
	}
}
