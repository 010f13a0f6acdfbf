package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lightbearco/tupper/agent"
	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/agent/netconf"
	"github.com/lightbearco/tupper/agent/process"
	"github.com/lightbearco/tupper/agent/startcmd"
)

// tokenEnv is how the engine hands the sandbox's access token to the agent.
// The agent removes it from the environment the commands it runs inherit.
const tokenEnv = "TUPPER_ACCESS_TOKEN"

// Grace periods when the agent is asked to stop.
const (
	childGrace  = 5 * time.Second // for children to exit on the forwarded signal
	serverGrace = 2 * time.Second // for open streams to deliver their end events
)

// options are the agent's command line.
type options struct {
	addr         string
	user         string
	workdir      string
	tokenFile    string
	tokenFD      int
	noEnsureUser bool
	// codeInterpreter is where to serve the code interpreter; empty for
	// none.
	codeInterpreter string
	// vsockPort and vsockForwardPort, when not zero, are AF_VSOCK ports
	// on which the agent also serves, and on which it forwards to the
	// sandbox's TCP ports (see forward.go): how a microVM's host reaches
	// it.
	vsockPort        uint
	vsockForwardPort uint
	// insideConns caps the connections from inside the sandbox (see
	// limitInside).
	insideConns int
	// startCmd and readyCmd are the template's start command and ready
	// check, run as startUser in startDir (see package startcmd).
	startCmd, readyCmd  string
	startUser, startDir string
	version             bool
	logOut              io.Writer
}

// maxVsockPort is the largest vsock port; the next is VMADDR_PORT_ANY.
const maxVsockPort = 1<<32 - 2

func parseFlags(args []string) (options, error) {
	o := options{logOut: os.Stderr}
	fs := flag.NewFlagSet("tupper-agent", flag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", ":49983", "listen address")
	fs.StringVar(&o.user, "user", identity.DefaultUser, "user requests act as when they name none")
	fs.StringVar(&o.workdir, "workdir", "", "where commands run when they name no directory (default: their user's home)")
	fs.StringVar(&o.tokenFile, "access-token-file", "", "file holding the access token requests must carry (default: $"+tokenEnv+", else none)")
	fs.IntVar(&o.tokenFD, "access-token-fd", -1, "descriptor to read the access token from (set by the agent itself, see hideToken)")
	fs.BoolVar(&o.noEnsureUser, "no-ensure-user", false, "do not create the user \""+identity.DefaultUser+"\" when the image lacks it")
	fs.StringVar(&o.codeInterpreter, "code-interpreter", "", "also serve the code interpreter (E2B's, on :49999) at this address")
	fs.UintVar(&o.vsockPort, "vsock-port", 0, "also serve on this AF_VSOCK port (0: none)")
	fs.UintVar(&o.vsockForwardPort, "vsock-forward-port", 0, "forward connections on this AF_VSOCK port to the sandbox's TCP ports (0: none)")
	fs.IntVar(&o.insideConns, "inside-conns", defaultInsideConns, "most connections at once from inside the sandbox (loopback, its own addresses); 0 for no cap")
	fs.StringVar(&o.startCmd, "start-cmd", "", "the template's start command, run at start with bash -l -c as a process tagged "+startcmd.Tag)
	fs.StringVar(&o.readyCmd, "ready-cmd", "", "the template's ready check: /health answers 503 until it exits 0 (none: ready once the start command runs)")
	fs.StringVar(&o.startUser, "start-user", "", "the user the start command and ready check run as (default: --user)")
	fs.StringVar(&o.startDir, "start-dir", "", "where the start command and ready check run (default: their user's home)")
	fs.BoolVar(&o.version, "version", false, "print the envd protocol version and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.vsockPort > maxVsockPort || o.vsockForwardPort > maxVsockPort {
		return o, fmt.Errorf("a vsock port must be below %d", uint64(maxVsockPort)+1)
	}
	if o.vsockPort != 0 && o.vsockPort == o.vsockForwardPort {
		return o, fmt.Errorf("--vsock-port and --vsock-forward-port are both %d", o.vsockPort)
	}
	return o, nil
}

// run serves until SIGTERM or SIGINT, then forwards the signal to the
// sandbox's processes, lets them and the open streams finish briefly, and
// returns.
func run(o options) error {
	if o.version {
		fmt.Println(agent.Version)
		return nil
	}
	log := slog.New(slog.NewTextHandler(o.logOut, nil))
	// First, before anything forks: reap orphans like PID 1 does.
	if err := process.Supervise(log); err != nil {
		log.Warn("cannot supervise orphans; only direct children will be reaped", "err", err)
	}
	token, err := accessToken(o.tokenFile, o.tokenFD)
	if err != nil {
		return err
	}
	if !o.noEnsureUser {
		if err := identity.EnsureDefaultUser(); err != nil {
			log.Warn("default user missing and not created", "user", identity.DefaultUser, "err", err)
		}
	}
	netEnv := map[string]string{}
	for _, k := range networkEnv {
		netEnv[k] = os.Getenv(k)
		os.Unsetenv(k)
	}
	// The files are the sandbox's own only when the agent is its first
	// process; anywhere else (a test on a host) they would be the host's,
	// and /init may not rewrite them either.
	var network *agent.Network
	if os.Getpid() == 1 {
		network = &agent.Network{}
		if err := configureNetwork(netEnv, network); err != nil {
			log.Warn("network configuration incomplete", "err", err)
		}
		removeTmpPlaceholder(log)
		enforceLimits(log)
	} else if netEnv[envNameserver]+netEnv[envSandboxAddr]+netEnv[envTrustCA] != "" {
		log.Warn("not the sandbox's first process: resolv.conf, hosts and the trust store are left alone")
	}
	// The commands inherit the agent's environment (the image's and the
	// sandbox's variables) minus the token and any malformed entry.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, ok := strings.Cut(kv, "=")
		return !ok || k == "" || k == tokenEnv || slices.Contains(networkEnv, k)
	})
	if netEnv[envTrustCA] != "" {
		env = append(env, netconf.EnvDefaults(env)...)
	}
	// Before the agent answers: a sandbox is ready once its agent is,
	// and the interpreter's port must take connections by then.
	var interp *interpreterSupervisor
	var tokenChanged func(string)
	if o.codeInterpreter != "" {
		if interp, err = startCodeInterpreter(log, o.codeInterpreter, o.user, env, token); err != nil {
			return err
		}
		tokenChanged = interp.setToken
	}
	var start *startcmd.Config
	if o.startCmd != "" || o.readyCmd != "" {
		start = &startcmd.Config{Cmd: o.startCmd, Ready: o.readyCmd, User: o.startUser, Dir: o.startDir}
	}
	h, err := agent.NewHandler(agent.Config{DefaultUser: o.user, DefaultWorkdir: o.workdir, Env: env, AccessToken: token, TokenChanged: tokenChanged, Network: network, Start: start, Logger: log})
	if err != nil {
		return err
	}
	ln, err := listenExclusive(o.addr)
	if err != nil {
		return err
	}
	ln = limitInside(ln, o.insideConns)
	// HTTP/1.1 for the SDKs; HTTP/2 without TLS (h2c) for clients that
	// want many streams on one connection.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &protocols, ReadHeaderTimeout: 30 * time.Second}
	listeners := []net.Listener{ln}
	if o.vsockPort != 0 {
		vln, err := listenVsock(uint32(o.vsockPort))
		if err != nil {
			ln.Close()
			return err
		}
		listeners = append(listeners, vln)
	}
	if o.vsockForwardPort != 0 {
		fln, err := listenVsock(uint32(o.vsockForwardPort))
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return err
		}
		defer fln.Close()
		go serveForward(fln, log)
		log.Info("forwarding to the sandbox's ports", "addr", fln.Addr().String())
	}

	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, len(listeners))
	for _, l := range listeners {
		go func() { served <- srv.Serve(l) }()
	}
	for _, l := range listeners[1:] {
		log.Info("agent serving", "addr", l.Addr().String())
	}
	log.Info("agent serving", "addr", ln.Addr().String(), "version", agent.Version, "pid", os.Getpid(), "user", o.user)

	select {
	case err := <-served:
		return err
	case sig := <-sigc:
		log.Info("stopping", "signal", sig.String())
		if interp != nil {
			// Else a server restarted after the signal would outlive
			// an agent that is not the sandbox's first process.
			interp.stop()
		}
		ctx, cancel := context.WithTimeout(context.Background(), childGrace)
		if err := process.Shutdown(ctx, sig); err != nil {
			log.Warn("stopping children", "err", err)
		}
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), serverGrace)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
		var errs []error
		for range listeners {
			if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}

// The variables through which the backend describes the sandbox's
// network (backend.EnvNameserver and the others; the agent does not import
// the host side's packages, so they are named again here).
const (
	envNameserver  = "TUPPER_NAMESERVER"
	envSandboxAddr = "TUPPER_SANDBOX_ADDR"
	envTrustCA     = "TUPPER_TRUST_CA"
)

var networkEnv = []string{envNameserver, envSandboxAddr, envTrustCA}

// configureNetwork writes the sandbox's resolver, hosts file and trusted
// CA as the backend's variables say, and records the address it gave
// the sandbox in into, for /init.
func configureNetwork(env map[string]string, into *agent.Network) error {
	c := netconf.Config{TrustCA: []byte(env[envTrustCA])}
	if v := env[envNameserver]; v != "" {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return fmt.Errorf("%s: %w", envNameserver, err)
		}
		c.Nameserver = a
	}
	if v := env[envSandboxAddr]; v != "" {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return fmt.Errorf("%s: %w", envSandboxAddr, err)
		}
		c.Addr, into.Addr = a, a
		host, err := os.Hostname()
		if err != nil {
			return err
		}
		c.Hostname = host
	}
	return netconf.Write(c)
}

// tmpPlaceholder is the file a backend may put into an empty /tmp so that
// its runtime leaves /tmp on the sandbox's disk rather than mounting a
// memory tmpfs there (backend/gvisor's tmpPlaceholder). It is of no use
// once the sandbox runs.
const tmpPlaceholder = "/tmp/.tupper-placeholder"

// removeTmpPlaceholder removes tmpPlaceholder; only the sandbox's first
// process calls it.
func removeTmpPlaceholder(log *slog.Logger) {
	if err := os.Remove(tmpPlaceholder); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("cannot remove the /tmp placeholder", "err", err)
	}
}

// accessToken reads the token from file when one is named, else from
// descriptor fd when it is not -1, else from the environment, and removes
// it from the environment either way.
func accessToken(file string, fd int) (string, error) {
	token := os.Getenv(tokenEnv)
	os.Unsetenv(tokenEnv)
	if fd >= 0 {
		f := os.NewFile(uintptr(fd), "access-token")
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("access token from descriptor %d: %w", fd, err)
		}
		token = string(b)
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("access token: %w", err)
		}
		token = string(b)
	}
	return strings.TrimSpace(token), nil
}
