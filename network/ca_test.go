package network

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestAuthorityPersists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	a, err := loadOrCreateAuthority(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := loadOrCreateAuthority(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(a.CertPEM()) != string(b.CertPEM()) {
		t.Error("a second load made a new CA, want the one kept in dir")
	}
	st, err := os.Stat(filepath.Join(dir, caKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if mode := st.Mode().Perm(); mode != 0o600 {
		t.Errorf("key file mode %o, want 600", mode)
	}

	block, _ := pem.Decode(a.CertPEM())
	if block == nil {
		t.Fatal("CertPEM holds no PEM block")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.Subject.CommonName != caName {
		t.Errorf("CA certificate: IsCA %v, CN %q", ca.IsCA, ca.Subject.CommonName)
	}
	if life := ca.NotAfter.Sub(ca.NotBefore); life < 9*365*24*time.Hour {
		t.Errorf("CA valid for %v, want about ten years", life)
	}
}

func TestAuthorityLeafVerifies(t *testing.T) {
	a, err := loadOrCreateAuthority(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A leaf minted after a reload must chain to the same root.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.CertPEM())
	for _, host := range []string{"api.test", "API.test.", "127.0.0.7"} {
		t.Run(host, func(t *testing.T) {
			c, err := a.leaf(host)
			if err != nil {
				t.Fatal(err)
			}
			inter := x509.NewCertPool()
			for _, der := range c.Certificate[1:] {
				cert, err := x509.ParseCertificate(der)
				if err != nil {
					t.Fatal(err)
				}
				inter.AddCert(cert)
			}
			name := hostOnly(host)
			if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: name}); err != nil {
				t.Errorf("leaf for %q does not verify: %v", host, err)
			}
			if life := c.Leaf.NotAfter.Sub(c.Leaf.NotBefore); life > 8*24*time.Hour {
				t.Errorf("leaf valid for %v, want short-lived", life)
			}
			again, err := a.leaf(host)
			if err != nil || again != c {
				t.Errorf("second leaf for %q was not the cached one (%v)", host, err)
			}
		})
	}
	if _, err := a.leaf(""); err == nil {
		t.Error("leaf for an empty host succeeded")
	}
}

func TestAuthorityRefusesMismatchedKey(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadOrCreateAuthority(dir); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if _, err := loadOrCreateAuthority(other); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(other, caKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, caKeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateAuthority(dir); err == nil {
		t.Error("loaded a CA whose key file holds another key")
	}
}
