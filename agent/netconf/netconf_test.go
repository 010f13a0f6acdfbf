package netconf

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	root := t.TempDir()
	// An image whose resolv.conf is a symlink out of the root, and which
	// has a Debian bundle already.
	os.MkdirAll(filepath.Join(root, "etc/ssl/certs"), 0o755)
	outside := filepath.Join(t.TempDir(), "outside")
	os.WriteFile(outside, []byte("nameserver 9.9.9.9\n"), 0o644)
	if err := os.Symlink(outside, filepath.Join(root, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"), []byte("-----BEGIN CERTIFICATE-----\nOLD\n-----END CERTIFICATE-----"), 0o644)
	ca := []byte("-----BEGIN CERTIFICATE-----\nNEW\n-----END CERTIFICATE-----\n")
	c := Config{Root: root, Nameserver: netip.MustParseAddr("10.213.0.1"), Hostname: "sbx1", Addr: netip.MustParseAddr("10.213.0.2"), TrustCA: ca}
	for range 2 { // idempotent: the CA is appended once
		if err := Write(c); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("etc/resolv.conf"); !strings.Contains(got, "nameserver 10.213.0.1\n") || strings.Contains(got, "9.9.9.9") {
		t.Errorf("resolv.conf = %q", got)
	}
	if b, _ := os.ReadFile(outside); string(b) != "nameserver 9.9.9.9\n" {
		t.Errorf("the symlink's target outside the root was written: %q", b)
	}
	if got := read("etc/hosts"); !strings.Contains(got, "10.213.0.2\tsbx1\n") || !strings.Contains(got, "127.0.0.1\tlocalhost") {
		t.Errorf("hosts = %q", got)
	}
	bundle := read("etc/ssl/certs/ca-certificates.crt")
	if strings.Count(bundle, "NEW") != 1 || !strings.Contains(bundle, "OLD\n-----END CERTIFICATE-----\n-----BEGIN") {
		t.Errorf("bundle = %q", bundle)
	}
	if got := read(CAFile); got != string(ca) {
		t.Errorf("CA file = %q", got)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/pki/tls/certs/ca-bundle.crt")); err == nil {
		t.Error("a bundle the image lacks was created beside the one it has")
	}
}

func TestWriteNoBundle(t *testing.T) {
	root := t.TempDir()
	if err := Write(Config{Root: root, TrustCA: []byte("PEM")}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, bundles[0])); err != nil || string(b) != "PEM\n" {
		t.Fatalf("bundle = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/resolv.conf")); err == nil {
		t.Error("resolv.conf written without a nameserver")
	}
}

func TestEnvDefaults(t *testing.T) {
	if got := EnvDefaults([]string{"PATH=/bin"}); len(got) != 1 || got[0] != "NODE_EXTRA_CA_CERTS="+CAFile {
		t.Errorf("EnvDefaults = %q", got)
	}
	if got := EnvDefaults([]string{"NODE_EXTRA_CA_CERTS=/mine.pem"}); got != nil {
		t.Errorf("EnvDefaults overrode the user's: %q", got)
	}
}
