package template

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

func TestPublicAddr(t *testing.T) {
	host := []netip.Addr{netip.MustParseAddr("198.51.100.7")}
	for _, tt := range []struct {
		name, ip string
		public   bool
	}{
		{name: "public IPv4", ip: "203.0.113.10", public: true},
		{name: "public IPv6", ip: "2001:db8::1", public: true},
		{name: "loopback", ip: "127.0.0.1"},
		{name: "loopback elsewhere in 127/8", ip: "127.9.9.9"},
		{name: "IPv6 loopback", ip: "::1"},
		{name: "IPv4-mapped loopback", ip: "::ffff:127.0.0.1"},
		{name: "private", ip: "10.1.2.3"},
		{name: "private 172.16/12", ip: "172.20.0.1"},
		{name: "private 192.168/16", ip: "192.168.1.1"},
		{name: "metadata", ip: "169.254.169.254"},
		{name: "unspecified", ip: "0.0.0.0"},
		{name: "unique local", ip: "fd00:ec2::254"},
		{name: "link-local with a zone", ip: "fe80::1%eth0"},
		{name: "the host's own public address", ip: "198.51.100.7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := publicAddr(netip.MustParseAddr(tt.ip), host); got != tt.public {
				t.Errorf("publicAddr(%s) = %v, want %v", tt.ip, got, tt.public)
			}
		})
	}
}

// TestPublicTransportStaysOffTheHost sends a request through the transport
// of builds' pulls to a server on the host's loopback: it fails before
// any byte reaches the server, saying why.
func TestPublicTransportStaysOffTheHost(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	for _, u := range []string{srv.URL + "/v2/", strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/v2/"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		resp, err := publicTransport.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			t.Errorf("GET %s through the builds' transport: %s, want it refused", u, resp.Status)
		} else if !strings.Contains(err.Error(), "not a public address") {
			t.Errorf("GET %s through the builds' transport: %v, want it to say why", u, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the server on loopback got %d requests", n)
	}
}
