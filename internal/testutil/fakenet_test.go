package testutil

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// These tests send traffic only from the host to the fixture's namespace.

// fakeClient returns an HTTP client that resolves names through the
// fixture's DNS server, trusts its CA and connects over network ("tcp4"
// or "tcp6"; names have both A and AAAA records).
//
// Its connections close with a reset, and the idle ones when t ends,
// before the fixture's cleanup: once the fixture's routes are gone, a
// packet to its addresses would follow the host's default route.
func fakeClient(t testing.TB, f *FakeInternet, network string) *http.Client {
	r := &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, f.DNS.String())
		},
	}
	d := &net.Dialer{Timeout: 5 * time.Second, Resolver: r}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			return c, err
		},
		TLSClientConfig: &tls.Config{RootCAs: f.CA},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

func get(t *testing.T, c *http.Client, url string, header http.Header) string {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(body)
}

func TestFakeInternet(t *testing.T) {
	f := StartFakeInternet(t)
	c := fakeClient(t, f, "tcp4")

	t.Run("http", func(t *testing.T) {
		tests := []struct {
			name, url, want string
		}{
			{"host A by address", "http://198.51.100.10/x", "hello from 198.51.100.10 host=198.51.100.10\n"},
			{"host B by address", "http://203.0.113.10/", "hello from 203.0.113.10 host=203.0.113.10\n"},
			{"host A by name", "http://api.allowed.test/a", "hello from 198.51.100.10 host=api.allowed.test\n"},
			{"host B by name", "http://b.test/", "hello from 203.0.113.10 host=b.test\n"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := get(t, c, tt.url, nil); got != tt.want {
					t.Errorf("got %q, want %q", got, tt.want)
				}
			})
		}
	})

	t.Run("https", func(t *testing.T) {
		tests := []struct {
			name, url, want string
		}{
			{"by name", "https://api.allowed.test/secure", "hello from 198.51.100.10 host=api.allowed.test\n"},
			{"wildcard", "https://www.allowed.test/", "hello from 198.51.100.10 host=www.allowed.test\n"},
			{"by address", "https://203.0.113.10/", "hello from 203.0.113.10 host=203.0.113.10\n"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := get(t, c, tt.url, nil); got != tt.want {
					t.Errorf("got %q, want %q", got, tt.want)
				}
			})
		}
		// An explicit SNI on a raw connection to the address.
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", "203.0.113.10:443",
			&tls.Config{RootCAs: f.CA, ServerName: "other.test"})
		if err != nil {
			t.Fatalf("tls dial with SNI other.test: %v", err)
		}
		conn.Close()
		// Without the CA the certificate is refused.
		_, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", "203.0.113.10:443",
			&tls.Config{ServerName: "other.test"})
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("dial without the CA: got %v, want an unknown authority error", err)
		}
	})

	t.Run("requests", func(t *testing.T) {
		get(t, c, "https://other.test/recorded", http.Header{"X-Probe": {"42"}})
		var got *FakeRequest
		for _, r := range f.Requests() {
			if r.Path == "/recorded" {
				got = &r
			}
		}
		if got == nil {
			t.Fatalf("no request for /recorded in %+v", f.Requests())
		}
		if got.Server != netip.MustParseAddrPort("198.51.100.10:443") || got.Host != "other.test" ||
			got.SNI != "other.test" || got.Header.Get("X-Probe") != "42" || got.Time.IsZero() {
			t.Errorf("recorded %+v", *got)
		}
		body := get(t, c, "http://b.test/headers", http.Header{"X-Probe": {"7"}})
		var h http.Header
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatalf("/headers: %v: %q", err, body)
		}
		if h.Get("X-Probe") != "7" || h.Get("Host") != "b.test" {
			t.Errorf("/headers: %v", h)
		}
	})

	t.Run("slow", func(t *testing.T) {
		resp, err := c.Get("http://api.allowed.test/slow")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		start := time.Now()
		for i := range 3 {
			line, err := br.ReadString('\n')
			if err != nil || line != fmt.Sprintf("line %d from 198.51.100.10\n", i) {
				t.Fatalf("line %d: %q, %v", i, line, err)
			}
		}
		if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
			t.Errorf("3 lines took %v, want about 200ms", d)
		}
	})

	t.Run("ipv6", func(t *testing.T) {
		if f.HostA6 != netip.MustParseAddr("2001:db8::10") {
			t.Fatalf("HostA6 = %s", f.HostA6)
		}
		c6 := fakeClient(t, f, "tcp6")
		tests := []struct {
			name, url, want string
			server          string // the request's FakeRequest.Server
		}{
			{"http by address", "http://[2001:db8::10]/v6", "hello from 2001:db8::10 host=[2001:db8::10]\n", "[2001:db8::10]:80"},
			{"https by address", "https://[2001:db8::10]/v6s", "hello from 2001:db8::10 host=[2001:db8::10]\n", "[2001:db8::10]:443"},
			{"http by name", "http://www.allowed.test/v6n", "hello from 2001:db8::10 host=www.allowed.test\n", "[2001:db8::10]:80"},
			{"https by name", "https://api.allowed.test/v6sn", "hello from 2001:db8::10 host=api.allowed.test\n", "[2001:db8::10]:443"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := get(t, c6, tt.url, nil); got != tt.want {
					t.Errorf("got %q, want %q", got, tt.want)
				}
				path := tt.url[strings.LastIndex(tt.url, "/"):]
				var seen []netip.AddrPort
				for _, r := range f.Requests() {
					if r.Path == path {
						seen = append(seen, r.Server)
					}
				}
				if want := netip.MustParseAddrPort(tt.server); len(seen) != 1 || seen[0] != want {
					t.Errorf("requests for %s came in on %v, want [%s]", path, seen, want)
				}
			})
		}
		// The certificate names the address.
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", "[2001:db8::10]:443", &tls.Config{RootCAs: f.CA})
		if err != nil {
			t.Fatalf("tls dial [2001:db8::10]:443: %v", err)
		}
		conn.Close()
	})

	t.Run("own", func(t *testing.T) {
		for _, a := range []netip.Addr{netip.MustParseAddr("2001:db8:1::7"), netip.MustParseAddr("192.0.2.7")} {
			t.Run(a.String(), func(t *testing.T) {
				l := f.Own(t, a, 8080)
				if got, want := l.Addr().String(), netip.AddrPortFrom(a, 8080).String(); got != want {
					t.Errorf("listener at %s, want %s", got, want)
				}
				conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(a, 8080).String(), 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				// A reset at close: nothing is left to send once the
				// route goes at the end of the subtest.
				defer conn.Close()
				conn.(*net.TCPConn).SetLinger(0)
				conn.SetDeadline(time.Now().Add(5 * time.Second))
				if n, err := conn.Read(make([]byte, 1)); n != 0 || err != io.EOF {
					t.Errorf("read from %s: %d, %v; want the listener to close", a, n, err)
				}
			})
		}
	})

	t.Run("echo", func(t *testing.T) {
		for _, a := range []netip.Addr{f.HostA, f.HostB, f.HostA6} {
			conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(a, 7000).String(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(conn, "ping %s\n", a)
			line, err := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if want := "ping " + a.String() + "\n"; err != nil || line != want {
				t.Errorf("echo at %s: %q, %v; want %q", a, line, err, want)
			}
		}
	})

	t.Run("dns", func(t *testing.T) {
		tests := []struct {
			name  string
			qname string
			qtype uint16
			rcode int
			want  string // the answer's address, empty for none
		}{
			{"A", "api.allowed.test", dns.TypeA, dns.RcodeSuccess, "198.51.100.10"},
			{"A case-insensitive", "Other.TEST", dns.TypeA, dns.RcodeSuccess, "198.51.100.10"},
			{"A deep", "sub.api.allowed.test", dns.TypeA, dns.RcodeSuccess, "198.51.100.10"},
			{"A host B", "b.test", dns.TypeA, dns.RcodeSuccess, "203.0.113.10"},
			{"AAAA", "api.allowed.test", dns.TypeAAAA, dns.RcodeSuccess, "2001:db8::10"},
			{"AAAA other", "other.test", dns.TypeAAAA, dns.RcodeSuccess, "2001:db8::10"},
			{"AAAA www", "www.allowed.test", dns.TypeAAAA, dns.RcodeSuccess, "2001:db8::10"},
			{"AAAA deep", "sub.api.allowed.test", dns.TypeAAAA, dns.RcodeSuccess, "2001:db8::10"},
			{"AAAA host B is empty", "b.test", dns.TypeAAAA, dns.RcodeSuccess, ""},
			{"AAAA parent is empty", "allowed.test", dns.TypeAAAA, dns.RcodeSuccess, ""},
			{"parent of a name exists", "allowed.test", dns.TypeA, dns.RcodeSuccess, ""},
			{"unknown", "nope.test", dns.TypeA, dns.RcodeNameError, ""},
			{"outside test", "example.com", dns.TypeA, dns.RcodeNameError, ""},
		}
		for _, tt := range tests {
			for _, network := range []string{"udp", "tcp"} {
				t.Run(tt.name+"/"+network, func(t *testing.T) {
					rcode, got := lookup(t, f, network, tt.qname, tt.qtype)
					if rcode != tt.rcode || got != tt.want {
						t.Errorf("got %s %q, want %s %q", dns.RcodeToString[rcode], got, dns.RcodeToString[tt.rcode], tt.want)
					}
				})
			}
		}
	})

	t.Run("resolve", func(t *testing.T) {
		f.Resolve("new.example", f.HostB)
		f.Resolve("api.allowed.test", f.HostB)
		t.Cleanup(func() { f.Resolve("api.allowed.test", f.HostA) })
		for name, want := range map[string]string{"new.example": "203.0.113.10", "api.allowed.test": "203.0.113.10"} {
			if rcode, got := lookup(t, f, "udp", name, dns.TypeA); rcode != dns.RcodeSuccess || got != want {
				t.Errorf("%s: got %s %q, want %q", name, dns.RcodeToString[rcode], got, want)
			}
		}
		// Away from host A, a name loses its AAAA record; an IPv6 address
		// gives it one and no A record.
		if rcode, got := lookup(t, f, "udp", "api.allowed.test", dns.TypeAAAA); rcode != dns.RcodeSuccess || got != "" {
			t.Errorf("AAAA api.allowed.test at host B: got %s %q, want none", dns.RcodeToString[rcode], got)
		}
		f.Resolve("six.example", netip.MustParseAddr("2001:db8::10"))
		if rcode, got := lookup(t, f, "udp", "six.example", dns.TypeAAAA); rcode != dns.RcodeSuccess || got != "2001:db8::10" {
			t.Errorf("AAAA six.example: got %s %q", dns.RcodeToString[rcode], got)
		}
		if rcode, got := lookup(t, f, "udp", "six.example", dns.TypeA); rcode != dns.RcodeSuccess || got != "" {
			t.Errorf("A six.example: got %s %q, want none", dns.RcodeToString[rcode], got)
		}
		// HTTPS to a name the fixed certificate does not cover.
		if got, want := get(t, c, "https://new.example/", nil), "hello from 203.0.113.10 host=new.example\n"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
}

// lookup asks the fixture's DNS server over network and returns the rcode
// and the address of the first answer.
func lookup(t *testing.T, f *FakeInternet, network, name string, qtype uint16) (int, string) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, f.DNS.String())
	if err != nil {
		t.Fatalf("%s %s over %s: %v", dns.TypeToString[qtype], name, network, err)
	}
	if !r.Authoritative {
		t.Errorf("%s: answer not authoritative", name)
	}
	if len(r.Answer) == 0 {
		return r.Rcode, ""
	}
	switch a := r.Answer[0].(type) {
	case *dns.A:
		return r.Rcode, a.A.String()
	case *dns.AAAA:
		return r.Rcode, a.AAAA.String()
	}
	return r.Rcode, r.Answer[0].String()
}

// TestFakeInternetCleanup checks that a fixture leaves nothing behind and
// that the next one works.
func TestFakeInternetCleanup(t *testing.T) {
	var first *FakeInternet
	owned := netip.MustParseAddr("2001:db8:1::8")
	t.Run("first", func(t *testing.T) {
		first = StartFakeInternet(t)
		get(t, fakeClient(t, first, "tcp4"), "http://198.51.100.10/", nil)
		get(t, fakeClient(t, first, "tcp6"), "http://[2001:db8::10]/", nil)
		first.Own(t, owned, 9)
	})
	if first == nil {
		t.Fatal("first fixture did not start")
	}
	if _, err := netlink.LinkByName(first.hostIf); err == nil {
		t.Errorf("veth %s left behind", first.hostIf)
	}
	if _, err := os.Stat(first.NS); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns %s left behind: %v", first.NS, err)
	}
	routes, err := netlink.RouteList(nil, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if ones, _ := r.Dst.Mask.Size(); r.Dst == nil || ones == 0 {
			continue // the host's default route
		}
		for _, a := range []netip.Addr{first.HostA, first.HostB, first.DNS.Addr(), first.hostSide.Masked().Addr()} {
			if r.Dst.Contains(a.AsSlice()) {
				t.Errorf("route left behind: %v", r)
			}
		}
	}
	routes6, err := netlink.RouteList(nil, unix.AF_INET6)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes6 {
		if r.Dst == nil {
			continue
		}
		if ones, _ := r.Dst.Mask.Size(); ones == 0 {
			continue // the host's default route
		}
		for _, a := range []netip.Addr{first.HostA6, owned, first.hostSide6.Masked().Addr()} {
			if r.Dst.Contains(a.AsSlice()) {
				t.Errorf("IPv6 route left behind: %v", r)
			}
		}
	}
	addrs, _ := netlink.AddrList(nil, netlink.FAMILY_ALL)
	for _, a := range addrs {
		if a.IP.Equal(first.hostSide.Addr().AsSlice()) || a.IP.Equal(first.hostSide6.Addr().AsSlice()) {
			t.Errorf("address left behind: %v", a)
		}
	}

	second := StartFakeInternet(t)
	if got, want := get(t, fakeClient(t, second, "tcp4"), "https://b.test/again", nil), "hello from 203.0.113.10 host=b.test\n"; got != want {
		t.Errorf("second fixture: got %q, want %q", got, want)
	}
	if n := len(second.Requests()); n != 1 {
		t.Errorf("second fixture saw %d requests, want 1 (its own)", n)
	}
}
