package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/agent/interpreter"
	"github.com/lightbearco/tupper/agent/process"
	"golang.org/x/sys/unix"
)

// interpreterCommand is the agent binary's mode that serves the code
// interpreter; the agent starts itself in it (startCodeInterpreter).
const interpreterCommand = "code-interpreter"

// Restart pacing of the code interpreter's server.
const (
	interpreterMinBackoff = 100 * time.Millisecond
	interpreterMaxBackoff = 10 * time.Second
)

// tokenAckTimeout bounds how long a running code interpreter server may
// take to confirm a new access token before it is stopped instead.
const tokenAckTimeout = 5 * time.Second

// startCodeInterpreter binds addr and keeps a code interpreter server on
// it, as user, restarting it if it exits. The agent holds the listening
// socket for the sandbox's life, so nothing else in the sandbox can take
// the port, and connections wait in its backlog while a server starts.
// The server checks token, until the supervisor's setToken replaces it
// (the agent's /init: agent.Config.TokenChanged); the supervisor's stop
// ends the restarts, before the agent stops its children.
func startCodeInterpreter(log *slog.Logger, addr, user string, env []string, token string) (*interpreterSupervisor, error) {
	ln, err := listenExclusive(addr)
	if err != nil {
		return nil, fmt.Errorf("code interpreter: %w", err)
	}
	lf, err := ln.(*net.TCPListener).File()
	ln.Close() // lf holds the socket
	if err != nil {
		return nil, fmt.Errorf("code interpreter: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("code interpreter: %w", err)
	}
	s := &interpreterSupervisor{log: log, exe: exe, ln: lf, user: user, env: env, ackTimeout: tokenAckTimeout, token: token}
	go func() {
		backoff := interpreterMinBackoff
		for {
			started := time.Now()
			if err := s.runOnce(); errors.Is(err, errStopped) {
				return
			} else if err != nil {
				log.Error("code interpreter", "err", err)
			}
			if time.Since(started) > time.Minute {
				backoff = interpreterMinBackoff
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, interpreterMaxBackoff)
		}
	}()
	log.Info("code interpreter listening", "addr", addr, "user", user)
	return s, nil
}

// errStopped is runOnce's answer once stop was called.
var errStopped = errors.New("code interpreter stopped")

// interpreterSupervisor runs the code interpreter's server, one at a time,
// and tells it the access token over a socket pair (never the environment,
// which the kernels, and so every cell, inherit): a JSON string first, the
// token to start with, then one per replacement, which the server
// acknowledges with a newline once /execute checks it
// (serveCodeInterpreter). The server, like every mode of the agent, is
// undumpable, so the user it runs as cannot reach its end of the pair.
type interpreterSupervisor struct {
	log  *slog.Logger
	exe  string
	ln   *os.File
	user string
	env  []string
	// ackTimeout is tokenAckTimeout but in tests.
	ackTimeout time.Duration

	// mu orders setToken and stop with starts, so that a server never
	// starts with a token older than the one the agent checks, nor once
	// the agent is stopping.
	mu      sync.Mutex
	token   string
	live    *interpreterServer // nil between servers
	stopped bool
}

// interpreterServer is a running server and the agent's end of its
// token channel.
type interpreterServer struct {
	conn   net.Conn
	pid    int
	exited <-chan struct{}
}

// runOnce runs a server until it exits.
func (s *interpreterSupervisor) runOnce() error {
	u, err := identity.Lookup(s.user)
	if err != nil {
		return err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("token channel: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "token-channel"), os.NewFile(uintptr(fds[1]), "token-channel")
	defer theirs.Close()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return fmt.Errorf("token channel: %w", err)
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		conn.Close()
		return errStopped
	}
	// The pair's buffer takes a token whole: the server reads it first.
	conn.SetWriteDeadline(time.Now().Add(s.ackTimeout))
	if err := json.NewEncoder(conn).Encode(s.token); err != nil {
		s.mu.Unlock()
		conn.Close()
		return fmt.Errorf("token channel: %w", err)
	}
	pid, exited, err := process.StartDaemon(s.log, process.Daemon{
		Path: s.exe, Args: []string{"tupper-agent", interpreterCommand, "--listen-fd", "3", "--token-fd", "4"},
		User: u, Env: s.env, Files: []*os.File{s.ln, theirs}, Stderr: os.Stderr,
	})
	if err != nil {
		s.mu.Unlock()
		conn.Close()
		return err
	}
	live := &interpreterServer{conn: conn, pid: pid, exited: exited}
	s.live = live
	s.mu.Unlock()
	theirs.Close()

	<-exited
	s.mu.Lock()
	if s.live == live {
		s.live = nil
	}
	s.mu.Unlock()
	conn.Close()
	s.log.Warn("code interpreter exited", "pid", pid)
	return nil
}

// stop ends the restarts: no server starts after it returns, so that
// the agent's signal to its children (process.Shutdown) reaches the last
// one. It leaves a running server alone.
func (s *interpreterSupervisor) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

// setToken makes token the one the server checks, and returns once no
// server takes the old one: the running server has acknowledged it, or,
// when it did not in time, has been killed (with what it started), so
// that the next starts with token.
func (s *interpreterSupervisor) setToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
	l := s.live
	if l == nil {
		return
	}
	l.conn.SetDeadline(time.Now().Add(s.ackTimeout))
	err := json.NewEncoder(l.conn).Encode(token)
	if err == nil {
		var ack [1]byte
		if _, err = io.ReadFull(l.conn, ack[:]); err == nil && ack[0] != '\n' {
			err = fmt.Errorf("acknowledged with %q", ack[0])
		}
	}
	if err == nil {
		return
	}
	select {
	case <-l.exited:
		// Gone already (and reaped: its pid may be another's now).
	default:
		s.log.Warn("code interpreter did not take the new access token; stopping it so that it starts again with it", "pid", l.pid, "err", err)
		// The server leads a process group of its own (StartDaemon);
		// its kernels, in groups of their own, die with it (Pdeathsig).
		if err := unix.Kill(-l.pid, unix.SIGKILL); err != nil {
			unix.Kill(l.pid, unix.SIGKILL)
		}
		<-l.exited
	}
	s.live = nil
}

// serveCodeInterpreter is the code-interpreter mode: it serves the
// interpreter on the socket the agent passed until SIGTERM or SIGINT.
func serveCodeInterpreter(args []string) error {
	fs := flag.NewFlagSet("tupper-agent "+interpreterCommand, flag.ContinueOnError)
	listenFD := fs.Int("listen-fd", 3, "descriptor of the listening socket")
	tokenFD := fs.Int("token-fd", -1, "descriptor of the socket the agent sends the access token on (see interpreterSupervisor); default: $"+tokenEnv+", fixed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "code-interpreter")
	var token string
	var tokens *json.Decoder
	var channel net.Conn
	if *tokenFD >= 0 {
		f := os.NewFile(uintptr(*tokenFD), "token-channel")
		// FileConn's copy is close-on-exec: the kernels must not get it.
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("the token channel: %w", err)
		}
		channel, tokens = c, json.NewDecoder(c)
		if err := tokens.Decode(&token); err != nil {
			return fmt.Errorf("the token channel: %w", err)
		}
	} else {
		var err error
		if token, err = accessToken("", -1); err != nil {
			return err
		}
	}
	lf := os.NewFile(uintptr(*listenFD), "listener")
	ln, err := net.FileListener(lf)
	lf.Close()
	if err != nil {
		return fmt.Errorf("the listening socket: %w", err)
	}
	dir, err := os.UserHomeDir()
	if err != nil || dir == "" {
		dir = "/"
	}
	srv, err := interpreter.New(interpreter.Config{AccessToken: token, Env: os.Environ(), Dir: dir, Logger: log})
	if err != nil {
		return err
	}
	defer srv.Close()
	if tokens != nil {
		go followTokens(log, tokens, channel, srv)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 30 * time.Second}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-sigc:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}
}

// followTokens gives srv each token that arrives on the channel and
// acknowledges it once srv checks it, until the channel ends.
func followTokens(log *slog.Logger, tokens *json.Decoder, channel net.Conn, srv *interpreter.Server) {
	defer channel.Close()
	for {
		var token string
		if err := tokens.Decode(&token); err != nil {
			if !errors.Is(err, io.EOF) {
				log.Error("the token channel", "err", err)
			}
			return
		}
		srv.SetAccessToken(token)
		if _, err := channel.Write([]byte{'\n'}); err != nil {
			log.Error("the token channel", "err", err)
			return
		}
		log.Info("access token replaced")
	}
}
