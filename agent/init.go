package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/lightbearco/tupper/agent/accesstoken"
	"github.com/lightbearco/tupper/agent/netconf"
	"github.com/lightbearco/tupper/errdefs"
)

// maxInitBody bounds the body of /init; what it carries is a few short
// strings.
const maxInitBody = 64 << 10

// Network is the part of the sandbox's view of its network that /init
// rewrites after a restore into another network: /etc/resolv.conf and
// /etc/hosts (netconf). The trusted CA stays as it was written at start.
type Network struct {
	// Root is the file system root of the files; empty means "/".
	Root string
	// Addr is the sandbox's address as /etc/hosts names it now (invalid
	// for none); /init keeps it when it is given no sandboxAddr.
	Addr netip.Addr
}

// initRequest is the body of POST /init; every field is optional, and an
// absent one changes nothing.
type initRequest struct {
	AccessToken *string           `json:"accessToken"`
	Nameserver  *string           `json:"nameserver"`
	SandboxAddr *string           `json:"sandboxAddr"`
	Hostname    *string           `json:"hostname"`
	EnvVars     map[string]string `json:"envVars"`
}

// initChange is a checked initRequest.
type initChange struct {
	token      string // "" for no change
	nameserver netip.Addr
	addr       netip.Addr
	hostname   string
	env        map[string]string // added to the commands' environment
}

// network reports whether c changes the network files.
func (c initChange) network() bool {
	return c.nameserver.IsValid() || c.addr.IsValid() || c.hostname != ""
}

// initHandler serves POST /init, through which the engine, after it
// restored the sandbox from a checkpoint (possibly as a fork, with another
// address), gives the agent its new access token and network. Calls are
// serialized, so that the token the agent checks and the one it passed on
// (tokenChanged) are always the last call's.
type initHandler struct {
	token        *accesstoken.Token
	tokenChanged func(string)
	// addEnv adds variables to the environment of the commands to come.
	addEnv func(map[string]string)
	log    *slog.Logger

	mu  sync.Mutex
	net *Network // nil: /init may not touch the network files
}

func (h *initHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := readInit(w, r)
	if err == nil {
		h.mu.Lock()
		err = h.apply(c)
		h.mu.Unlock()
	}
	if err != nil {
		status := initStatus(err)
		if status == http.StatusInternalServerError {
			h.log.Error("init", "err", err)
		}
		writeError(w, status, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// readInit reads and checks r's body. Its errors are
// errdefs.ErrInvalidArgument.
func readInit(w http.ResponseWriter, r *http.Request) (initChange, error) {
	var req initRequest
	var c initChange
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxInitBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return c, fmt.Errorf("body over %d KiB: %w", maxInitBody>>10, errdefs.ErrInvalidArgument)
		}
		return c, fmt.Errorf(`body: %v; want a JSON object with "accessToken", "nameserver", "sandboxAddr", "hostname", "envVars", each optional: %w`, err, errdefs.ErrInvalidArgument)
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return c, fmt.Errorf("body: something follows the JSON object: %w", errdefs.ErrInvalidArgument)
	}
	var err error
	if req.AccessToken != nil {
		if err := accesstoken.Check(*req.AccessToken); err != nil {
			return c, fmt.Errorf("accessToken: %w", err)
		}
		c.token = *req.AccessToken
	}
	if req.Nameserver != nil {
		if c.nameserver, err = parseInitAddr(*req.Nameserver); err != nil {
			return c, fmt.Errorf("nameserver: %w", err)
		}
	}
	if req.SandboxAddr != nil {
		if c.addr, err = parseInitAddr(*req.SandboxAddr); err != nil {
			return c, fmt.Errorf("sandboxAddr: %w", err)
		}
	}
	if req.Hostname != nil {
		if err := checkHostname(*req.Hostname); err != nil {
			return c, fmt.Errorf("hostname: %w", err)
		}
		c.hostname = *req.Hostname
	}
	for k, v := range req.EnvVars {
		if !envName.MatchString(k) || strings.HasPrefix(k, "TUPPER_") || strings.ContainsRune(v, 0) {
			return c, fmt.Errorf("envVars: %q: names are letters, digits and '_' (not starting with a digit or TUPPER_), values hold no NUL: %w", k, errdefs.ErrInvalidArgument)
		}
	}
	c.env = req.EnvVars
	return c, nil
}

// envName is what a variable's name may be.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseInitAddr parses an address /init may write into resolv.conf or
// hosts: a unicast IPv4 or IPv6 address without a zone.
func parseInitAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return a, fmt.Errorf("%q is not an IP address: %w", s, errdefs.ErrInvalidArgument)
	case a.Zone() != "":
		return a, fmt.Errorf("%q has a zone: %w", s, errdefs.ErrInvalidArgument)
	case a.IsUnspecified(), a.IsMulticast():
		return a, fmt.Errorf("%q is not a unicast address: %w", s, errdefs.ErrInvalidArgument)
	}
	return a, nil
}

// checkHostname checks that name is a host name the kernel takes (at most
// 64 bytes) made of RFC 1123 labels, so that it cannot break /etc/hosts.
func checkHostname(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%d bytes, want 1 to 64: %w", len(name), errdefs.ErrInvalidArgument)
	}
	label := 0
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '.':
			if label == 0 || name[i-1] == '-' {
				return fmt.Errorf("%q has an empty label or one ending in '-': %w", name, errdefs.ErrInvalidArgument)
			}
			label = 0
		case c == '-' && label == 0:
			return fmt.Errorf("%q has a label starting with '-': %w", name, errdefs.ErrInvalidArgument)
		case c == '-', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			label++
			if label > 63 {
				return fmt.Errorf("%q has a label over 63 bytes: %w", name, errdefs.ErrInvalidArgument)
			}
		default:
			return fmt.Errorf("%q holds %q; want letters, digits, '-' and '.': %w", name, c, errdefs.ErrInvalidArgument)
		}
	}
	if name[len(name)-1] == '-' || name[len(name)-1] == '.' {
		return fmt.Errorf("%q ends in %q: %w", name, name[len(name)-1], errdefs.ErrInvalidArgument)
	}
	return nil
}

// apply makes c take effect: the network files first, so that when they
// fail the caller can try again with the token it has; the token last.
// h.mu is held.
func (h *initHandler) apply(c initChange) error {
	if c.network() && h.net == nil {
		return fmt.Errorf("the agent is not the sandbox's first process: /etc/resolv.conf and /etc/hosts are not the sandbox's own: %w", errdefs.ErrFailedPrecondition)
	}
	if c.token != "" && h.token.Get() == "" {
		return fmt.Errorf("the agent runs without an access token; /init replaces one but never adds one: %w", errdefs.ErrFailedPrecondition)
	}
	var changed []any
	if c.network() {
		nc := netconf.Config{Root: h.net.Root, Nameserver: c.nameserver}
		if c.addr.IsValid() || c.hostname != "" {
			nc.Addr, nc.Hostname = h.net.Addr, c.hostname
			if c.addr.IsValid() {
				nc.Addr = c.addr
			}
			if nc.Hostname == "" {
				host, err := os.Hostname()
				if err != nil {
					return fmt.Errorf("the current host name: %w", err)
				}
				nc.Hostname = host
			}
		}
		if err := netconf.Write(nc); err != nil {
			return err
		}
		if nc.Hostname != "" {
			h.net.Addr = nc.Addr
			changed = append(changed, "hostname", nc.Hostname, "sandboxAddr", nc.Addr.String())
		}
		if c.nameserver.IsValid() {
			changed = append(changed, "nameserver", c.nameserver.String())
		}
	}
	if len(c.env) > 0 {
		if h.addEnv == nil {
			return fmt.Errorf("this agent takes no environment through /init: %w", errdefs.ErrFailedPrecondition)
		}
		h.addEnv(c.env)
		changed = append(changed, "envVars", len(c.env))
	}
	if c.token != "" {
		h.token.Set(c.token)
		if h.tokenChanged != nil {
			h.tokenChanged(c.token)
		}
		changed = append(changed, "accessToken", "replaced")
	}
	if len(changed) == 0 {
		changed = []any{"changed", "nothing"}
	}
	h.log.Info("init", changed...)
	return nil
}

// initStatus maps /init's error classes to HTTP statuses: its one
// translation to the wire.
func initStatus(err error) int {
	switch {
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// errorBody is an error on the wire, as /files answers it.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(errorBody{Code: status, Message: msg})
}
