package network

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lightbearco/tupper/internal/atomicfile"
)

const (
	// caName is the common name of the egress certificate authority.
	caName = "Tupper egress CA"
	// caLifetime is how long a new authority is valid.
	caLifetime = 10 * 365 * 24 * time.Hour
	// leafLifetime is how long a minted leaf is valid; leafRenewBefore is
	// how close to its end a cached leaf is replaced.
	leafLifetime    = 7 * 24 * time.Hour
	leafRenewBefore = 24 * time.Hour
	// maxCachedLeaves bounds the leaf cache; past it the cache starts over.
	maxCachedLeaves = 4096
	// caCertFile and caKeyFile are the authority's files in its directory.
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
)

// authority is the certificate authority the egress proxy terminates TLS
// with, for the hosts whose requests a policy transforms. Sandboxes trust
// it through CertPEM. It is safe for concurrent use.
type authority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// loadOrCreateAuthority loads the authority kept in dir as ca.pem and
// ca-key.pem, or makes a new one (ECDSA P-256, valid ten years) and keeps
// it there when ca.pem does not exist or has expired. The key file is
// written mode 0600 before the certificate, so a certificate on disk
// always has its key.
func loadOrCreateAuthority(dir string) (*authority, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	certPEM, err := os.ReadFile(certPath)
	switch {
	case err == nil:
		a, err := parseAuthority(certPEM, keyPath)
		if err != nil {
			return nil, fmt.Errorf("egress CA in %s: %w", dir, err)
		}
		if time.Now().Before(a.cert.NotAfter) {
			return a, nil
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	a, keyPEM, err := newAuthority()
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	if err := atomicfile.Write(certPath, a.certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	return a, nil
}

func parseAuthority(certPEM []byte, keyPath string) (*authority, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s holds no PEM certificate", caCertFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caCertFile, err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("%s holds no PEM key", caKeyFile)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caKeyFile, err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%s does not hold the key of %s", caKeyFile, caCertFile)
	}
	return &authority{cert: cert, certPEM: certPEM, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

func newAuthority() (*authority, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          certSerial(),
		Subject:               pkix.Name{CommonName: caName, Organization: []string{"Tupper"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	a := &authority{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
		leaves:  map[string]*tls.Certificate{},
	}
	return a, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// CertPEM returns the authority's certificate, PEM-encoded, for sandboxes
// to trust.
func (a *authority) CertPEM() []byte { return append([]byte(nil), a.certPEM...) }

// leaf returns a certificate for host signed by the authority, with its
// chain. Leaves are short-lived and cached per host until close to their
// end.
func (a *authority) leaf(host string) (*tls.Certificate, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return nil, errors.New("egress CA: no host to mint a certificate for")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.leaves[host]; ok && time.Until(c.Leaf.NotAfter) > leafRenewBefore {
		return c, nil
	}
	c, err := a.mint(host)
	if err != nil {
		return nil, fmt.Errorf("egress CA: certificate for %q: %w", host, err)
	}
	if len(a.leaves) >= maxCachedLeaves {
		clear(a.leaves)
	}
	a.leaves[host] = c
	return c, nil
}

func (a *authority) mint(host string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(leafLifetime)
	if notAfter.After(a.cert.NotAfter) {
		notAfter = a.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: certSerial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

func certSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n.Add(n, big.NewInt(1))
}
