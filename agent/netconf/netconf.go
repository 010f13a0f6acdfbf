// Package netconf writes the sandbox's view of its network when the agent
// starts: /etc/resolv.conf naming the resolver the host serves on the
// sandbox's gateway, /etc/hosts naming the sandbox itself (so that
// lookups of its own hostname, Python's socket.getfqdn() among them, never
// wait on a resolver), and the host's egress CA in the system trust store.
//
// Each file is written in the sandbox's copy-on-write root: the shared
// image is never touched.
package netconf

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// Config says what to write; zero fields are skipped.
type Config struct {
	// Root is the file system root to write under; empty means "/".
	Root string
	// Nameserver is the sandbox's resolver.
	Nameserver netip.Addr
	// Hostname and Addr make the /etc/hosts entry of the sandbox itself.
	Hostname string
	Addr     netip.Addr
	// TrustCA is a PEM certificate to add to the system trust stores.
	TrustCA []byte
}

// CAFile is where the trusted CA is written, beside the bundles it is
// appended to; NODE_EXTRA_CA_CERTS points at it, since Node.js does not
// read the system bundle.
const CAFile = "/usr/local/share/ca-certificates/tupper-egress.crt"

// bundles are the system trust stores of the common distributions.
var bundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/cert.pem",                  // Alpine's libressl, Arch
}

// Write writes what c asks for and returns the first error of each file,
// joined; it goes on past errors so that one read-only file does not cost
// the others.
func Write(c Config) error {
	root := c.Root
	if root == "" {
		root = "/"
	}
	var errs []error
	if c.Nameserver.IsValid() {
		body := "# Written by Tupper: the sandbox's resolver, which applies its network policy.\n" +
			"nameserver " + c.Nameserver.String() + "\noptions edns0\n"
		errs = append(errs, writeFile(root, "/etc/resolv.conf", []byte(body), 0o644))
	}
	if c.Hostname != "" {
		errs = append(errs, writeFile(root, "/etc/hosts", hosts(c.Hostname, c.Addr), 0o644))
	}
	if len(c.TrustCA) > 0 {
		errs = append(errs, trust(root, c.TrustCA))
	}
	return errors.Join(errs...)
}

// hosts returns an /etc/hosts that names localhost and the sandbox.
func hosts(name string, addr netip.Addr) []byte {
	var b bytes.Buffer
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	if addr.IsValid() {
		fmt.Fprintf(&b, "%s\t%s\n", addr, name)
	} else {
		fmt.Fprintf(&b, "127.0.1.1\t%s\n", name)
	}
	return b.Bytes()
}

// trust writes the CA to CAFile and appends it to every system bundle
// that exists (or creates Debian's when none does), once.
func trust(root string, pem []byte) error {
	pem = append(bytes.TrimSpace(pem), '\n')
	errs := []error{writeFile(root, CAFile, pem, 0o644)}
	found := false
	for _, b := range bundles {
		p := filepath.Join(root, b)
		old, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		found = true
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if bytes.Contains(old, bytes.TrimSpace(pem)) {
			continue
		}
		if len(old) > 0 && !bytes.HasSuffix(old, []byte("\n")) {
			old = append(old, '\n')
		}
		errs = append(errs, writeFile(root, b, append(old, pem...), 0o644))
	}
	if !found {
		errs = append(errs, writeFile(root, bundles[0], pem, 0o644))
	}
	return errors.Join(errs...)
}

// writeFile replaces root/name with data. A symlink in the image (Debian's
// /etc/resolv.conf may be one) is replaced, not followed.
func writeFile(root, name string, data []byte, mode os.FileMode) error {
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("netconf: %w", err)
	}
	tmp := p + ".tupper-tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("netconf: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("netconf: %w", err)
	}
	return nil
}

// EnvDefaults returns the variables that make runtimes with trust stores
// of their own use the CA too, for those that env does not set already.
func EnvDefaults(env []string) []string {
	has := func(k string) bool {
		for _, kv := range env {
			if strings.HasPrefix(kv, k+"=") {
				return true
			}
		}
		return false
	}
	if has("NODE_EXTRA_CA_CERTS") {
		return nil
	}
	return []string{"NODE_EXTRA_CA_CERTS=" + CAFile}
}
