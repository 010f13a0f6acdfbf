package firecracker

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// vsockPeer plays the host side of Firecracker's vsock device on a unix
// socket: every connection gets to script, which sees what the backend
// sends.
type vsockPeer struct {
	path string
	mu   sync.Mutex
	got  []string // the request lines, in order
}

func newVsockPeer(t *testing.T, script func(p *vsockPeer, c net.Conn, r *bufio.Reader)) *vsockPeer {
	t.Helper()
	p := &vsockPeer{path: filepath.Join(t.TempDir(), "v.sock")}
	ln, err := net.Listen("unix", p.path)
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
				script(p, c, bufio.NewReader(c))
			}()
		}
	}()
	return p
}

// request reads one request line and records it.
func (p *vsockPeer) request(r *bufio.Reader) string {
	line, _ := r.ReadString('\n')
	p.mu.Lock()
	p.got = append(p.got, line)
	p.mu.Unlock()
	return line
}

func (p *vsockPeer) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

// answer returns a script that reads the request and writes answer.
func answer(s string) func(*vsockPeer, net.Conn, *bufio.Reader) {
	return func(p *vsockPeer, c net.Conn, r *bufio.Reader) {
		p.request(r)
		io.WriteString(c, s)
		// Keep the connection until the client is done with it.
		io.Copy(io.Discard, r)
	}
}

func TestDialVsock(t *testing.T) {
	p := newVsockPeer(t, func(p *vsockPeer, c net.Conn, r *bufio.Reader) {
		p.request(r)
		// The answer and the guest's first bytes in one write: the
		// handshake must take only its line.
		io.WriteString(c, "OK 1073741824\nhello from the guest")
		b, _ := r.ReadString('\n')
		io.WriteString(c, "|echo:"+b)
	})
	c, err := dialVsock(t.Context(), p.path, AgentVsockPort)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "ping\n")
	got, _ := io.ReadAll(c)
	if string(got) != "hello from the guest|echo:ping\n" {
		t.Errorf("read %q after the handshake", got)
	}
	if reqs := p.requests(); len(reqs) != 1 || reqs[0] != "CONNECT 49983\n" {
		t.Errorf("requests %q, want one CONNECT 49983", reqs)
	}
}

func TestDialVsockFailures(t *testing.T) {
	never := func(p *vsockPeer, c net.Conn, r *bufio.Reader) {
		p.request(r)
		io.Copy(io.Discard, r) // never answers
	}
	tests := []struct {
		name    string
		script  func(*vsockPeer, net.Conn, *bufio.Reader)
		timeout time.Duration
		wantIs  error
		want    string
	}{
		{name: "closed unanswered (nothing listens in the guest)", script: func(p *vsockPeer, c net.Conn, r *bufio.Reader) { p.request(r) }, wantIs: syscall.ECONNREFUSED},
		{name: "no port", script: answer("OK\n"), want: `unexpected answer "OK"`},
		{name: "bad port", script: answer("OK http\n"), want: `unexpected answer "OK http"`},
		{name: "other answer", script: answer("NOPE 1\n"), want: `unexpected answer "NOPE 1"`},
		{name: "answer cut short", script: func(p *vsockPeer, c net.Conn, r *bufio.Reader) { p.request(r); io.WriteString(c, "OK 1") }, want: `the answer "OK 1" was cut short`},
		{name: "endless answer", script: answer(strings.Repeat("O", 200)), want: "longer than 64 bytes"},
		{name: "no answer in time", script: never, timeout: 200 * time.Millisecond, wantIs: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newVsockPeer(t, tt.script)
			ctx := t.Context()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			c, err := dialVsock(ctx, p.path, 5000)
			if err == nil {
				c.Close()
				t.Fatal("dialVsock succeeded")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("err = %v, want it to be %v", err, tt.wantIs)
			}
			if tt.want != "" && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to say %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), p.path) || !strings.Contains(err.Error(), "5000") {
				t.Errorf("err = %v, want it to name the socket and port", err)
			}
		})
	}
	t.Run("cancelled while waiting", func(t *testing.T) {
		p := newVsockPeer(t, never)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		begin := time.Now()
		_, err := dialVsock(ctx, p.path, 5000)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(begin); d > handshakeTimeout/2 {
			t.Errorf("the cancelled dial returned after %v", d)
		}
	})
	t.Run("no socket", func(t *testing.T) {
		_, err := dialVsock(t.Context(), filepath.Join(t.TempDir(), "none.sock"), 5000)
		if !errors.Is(err, syscall.ENOENT) {
			t.Errorf("err = %v, want ENOENT", err)
		}
	})
}

func TestDialGuest(t *testing.T) {
	// The agent's forwarding port, as cmd/tupper-agent answers it.
	forwarder := func(answerTo func(req string) string) func(*vsockPeer, net.Conn, *bufio.Reader) {
		return func(p *vsockPeer, c net.Conn, r *bufio.Reader) {
			first := p.request(r)
			io.WriteString(c, "OK 1073741825\n")
			if first != "CONNECT 49984\n" {
				return
			}
			second := p.request(r)
			io.WriteString(c, answerTo(second))
			if strings.HasPrefix(answerTo(second), "OK") {
				io.WriteString(c, "user server")
			}
		}
	}
	t.Run("agent port", func(t *testing.T) {
		p := newVsockPeer(t, answer("OK 7\n"))
		c, err := dialGuest(t.Context(), p.path, AgentVsockPort)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if reqs := p.requests(); len(reqs) != 1 || reqs[0] != "CONNECT 49983\n" {
			t.Errorf("requests %q", reqs)
		}
	})
	t.Run("other port", func(t *testing.T) {
		p := newVsockPeer(t, forwarder(func(string) string { return "OK\n" }))
		c, err := dialGuest(t.Context(), p.path, 8080)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		got, _ := io.ReadAll(c)
		if string(got) != "user server" {
			t.Errorf("read %q", got)
		}
		want := []string{"CONNECT 49984\n", "CONNECT 8080\n"}
		if reqs := p.requests(); strings.Join(reqs, "") != strings.Join(want, "") {
			t.Errorf("requests %q, want %q", reqs, want)
		}
	})
	failures := []struct {
		name   string
		answer string
		wantIs error
		want   string
	}{
		{name: "refused", answer: "ERR refused\n", wantIs: syscall.ECONNREFUSED},
		{name: "other error", answer: "ERR dial tcp: i/o timeout\n", want: "the agent says: dial tcp: i/o timeout"},
		{name: "garbage", answer: "WHAT\n", want: `unexpected answer "WHAT"`},
		{name: "closed", answer: "", wantIs: syscall.ECONNREFUSED},
	}
	for _, f := range failures {
		t.Run(f.name, func(t *testing.T) {
			p := newVsockPeer(t, forwarder(func(string) string { return f.answer }))
			c, err := dialGuest(t.Context(), p.path, 8080)
			if err == nil {
				c.Close()
				t.Fatal("dialGuest succeeded")
			}
			if f.wantIs != nil && !errors.Is(err, f.wantIs) {
				t.Errorf("err = %v, want it to be %v", err, f.wantIs)
			}
			if f.want != "" && !strings.Contains(err.Error(), f.want) {
				t.Errorf("err = %v, want it to say %q", err, f.want)
			}
		})
	}
	for _, port := range []int{0, -1, 65536} {
		if _, err := dialGuest(t.Context(), "/nonexistent", port); err == nil || !strings.Contains(err.Error(), "not a TCP port") {
			t.Errorf("dialGuest(port %d) = %v", port, err)
		}
	}
}
