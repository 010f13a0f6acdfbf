package network

// CleanupReport says what HostCleanup did.
type CleanupReport struct {
	// Skipped says why nothing was changed, when nothing was: another
	// Tupper process uses the network, or sandboxes remain.
	Skipped string `json:"skipped,omitempty"`
	// Removed lists what went: the table, routes, accepts in the host's
	// firewalls, records and lock files, forwarding switched back off.
	Removed []string `json:"removed,omitempty"`
	// Kept lists what stayed on purpose, with why.
	Kept []string `json:"kept,omitempty"`
}

// HostFirewall is one firewall of the host's that would drop sandboxes'
// forwarded traffic, and what Tupper did or would do about it.
type HostFirewall struct {
	// Name says which firewall, e.g. "Docker (iptables-nft)", "ufw",
	// "firewalld", "iptables-legacy FORWARD policy DROP".
	Name string `json:"name"`
	// Place is where Tupper's accept goes, e.g. "DOCKER-USER".
	Place string `json:"place"`
	// InPlace reports whether Tupper's accept is there.
	InPlace bool `json:"inPlace"`
	// Commands add the accept by hand; a host whose daemon leaves the
	// host's firewalls alone (--host-firewall=off) needs them run.
	Commands []string `json:"commands"`
	// Err is why the firewall could not be read or changed, if it could
	// not.
	Err string `json:"error,omitempty"`
}
