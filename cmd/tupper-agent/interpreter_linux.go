package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/agent/interpreter"
	"github.com/lightbearco/tupper/agent/process"
)

// interpreterCommand is the agent binary's mode that serves the code
// interpreter; the agent starts itself in it (startCodeInterpreter).
const interpreterCommand = "code-interpreter"

// Restart pacing of the code interpreter's server.
const (
	interpreterMinBackoff = 100 * time.Millisecond
	interpreterMaxBackoff = 10 * time.Second
)

// startCodeInterpreter binds addr and keeps a code interpreter server on
// it, as user, restarting it if it exits. The agent holds the listening
// socket for the sandbox's life, so nothing else in the sandbox can take
// the port, and connections wait in its backlog while a server starts.
func startCodeInterpreter(log *slog.Logger, addr, user string, env []string, token string) error {
	ln, err := listenExclusive(addr)
	if err != nil {
		return fmt.Errorf("code interpreter: %w", err)
	}
	lf, err := ln.(*net.TCPListener).File()
	ln.Close() // lf holds the socket
	if err != nil {
		return fmt.Errorf("code interpreter: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("code interpreter: %w", err)
	}
	go func() {
		backoff := interpreterMinBackoff
		for {
			started := time.Now()
			if err := runInterpreterOnce(log, exe, lf, user, env, token); err != nil {
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
	return nil
}

// runInterpreterOnce runs the server until it exits.
func runInterpreterOnce(log *slog.Logger, exe string, ln *os.File, user string, env []string, token string) error {
	u, err := identity.Lookup(user)
	if err != nil {
		return err
	}
	// The token goes through a pipe, not the environment that the
	// kernels, and so every cell, inherit.
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, token)
	w.Close()
	if err != nil {
		r.Close()
		return err
	}
	pid, exited, err := process.StartDaemon(log, process.Daemon{
		Path: exe, Args: []string{"tupper-agent", interpreterCommand, "--listen-fd", "3", "--token-fd", "4"},
		User: u, Env: env, Files: []*os.File{ln, r}, Stderr: os.Stderr,
	})
	r.Close()
	if err != nil {
		return err
	}
	<-exited
	log.Warn("code interpreter exited; starting it again", "pid", pid)
	return nil
}

// serveCodeInterpreter is the code-interpreter mode: it serves the
// interpreter on the socket the agent passed until SIGTERM or SIGINT.
func serveCodeInterpreter(args []string) error {
	fs := flag.NewFlagSet("tupper-agent "+interpreterCommand, flag.ContinueOnError)
	listenFD := fs.Int("listen-fd", 3, "descriptor of the listening socket")
	tokenFD := fs.Int("token-fd", -1, "descriptor to read the access token from")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "code-interpreter")
	token, err := accessToken("", *tokenFD)
	if err != nil {
		return err
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
