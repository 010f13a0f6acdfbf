package server

import (
	"fmt"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/lightbearco/tupper/backend"
)

// The data plane's request headers.
const (
	headerSandboxID    = "E2b-Sandbox-Id"
	headerSandboxPort  = "E2b-Sandbox-Port"
	headerAccessToken  = "X-Access-Token"
	headerTrafficToken = "E2b-Traffic-Access-Token"
	headerAPIKey       = "X-Api-Key"
)

// agentPort is the envd port, where the agent listens in every sandbox.
const agentPort = backend.AgentPort

// routingHeaders are dropped before a request enters a sandbox: they mean
// something to the server only, and an API key must never reach one.
var routingHeaders = []string{headerSandboxID, headerSandboxPort, headerTrafficToken, headerAPIKey}

// hostTarget is what a Host of the form <port>-<sandboxID>.<domain> names.
type hostTarget struct {
	port int
	id   string
}

// parseSandboxHost reads a Host header shaped like the SDKs' getHost(port),
// "<port>-<sandboxID>.<domain>[:<port>]". The domain is not checked: the
// first label is distinctive enough, and a server reached under several
// names keeps working.
func parseSandboxHost(host string) (hostTarget, bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, rest, ok := strings.Cut(strings.ToLower(host), ".")
	if !ok || rest == "" {
		return hostTarget{}, false
	}
	portStr, id, ok := strings.Cut(label, "-")
	if !ok || !validSandboxID(id) || len(portStr) == 0 || len(portStr) > 5 {
		return hostTarget{}, false
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 || portStr[0] == '0' {
		return hostTarget{}, false
	}
	return hostTarget{port: port, id: id}, true
}

// validSandboxID reports whether id is shaped like a sandbox id: 1 to 40
// characters of [a-z0-9-], starting with a letter or digit.
func validSandboxID(id string) bool {
	if id == "" || len(id) > 40 || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// sandboxPort reads E2b-Sandbox-Port; absent means the agent's port.
func sandboxPort(r *http.Request) (int, error) {
	s := r.Header.Get(headerSandboxPort)
	if s == "" {
		return agentPort, nil
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("%s %q is not a port number", headerSandboxPort, s)
	}
	return p, nil
}

// orchestratorPaths are envd endpoints that only E2B's orchestrator calls;
// they are never reachable through the server.
var orchestratorPaths = []string{"/init", "/freeze", "/unfreeze", "/snapshot", "/pause", "/resume"}

// checkAgentPath decides whether a client may call path on the agent: the
// Connect services, /files, /health, /envs and /metrics. It returns the
// status and message to refuse with, or 0.
func checkAgentPath(p string) (int, string) {
	if path.Clean(p) != p {
		return http.StatusBadRequest, fmt.Sprintf("path %q is not in canonical form", p)
	}
	for _, o := range orchestratorPaths {
		if p == o || strings.HasPrefix(p, o+"/") {
			return http.StatusForbidden, fmt.Sprintf("%s is reserved for the orchestrator and never reachable through the server", p)
		}
	}
	switch {
	case p == "/files", p == "/health", p == "/envs", p == "/metrics":
		return 0, ""
	case strings.HasPrefix(p, "/process.Process/"), strings.HasPrefix(p, "/filesystem.Filesystem/"):
		return 0, ""
	}
	return http.StatusNotFound, fmt.Sprintf("the sandbox agent has no endpoint %s", p)
}
