package network

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// testZone is an upstream resolver with a few fixed names.
type testZone struct {
	queries    atomic.Int32
	tcpQueries atomic.Int32
}

const bigAnswers = 40

func (z *testZone) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	z.queries.Add(1)
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	if tcp {
		z.tcpQueries.Add(1)
	}
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	add := func(s string) {
		rr, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		m.Answer = append(m.Answer, rr)
	}
	switch name, t := strings.ToLower(q.Name), q.Qtype; {
	case name == "allowed.test." && t == dns.TypeA:
		add("allowed.test. 60 IN A 192.0.2.1")
	case name == "allowed.test." && t == dns.TypeAAAA:
		add("allowed.test. 60 IN AAAA 2001:db8::1")
	case name == "alias.test.":
		add("alias.test. 60 IN CNAME allowed.test.")
		if t == dns.TypeAAAA {
			add("allowed.test. 60 IN AAAA 2001:db8::1")
		} else {
			add("allowed.test. 60 IN A 192.0.2.1")
		}
	case name == "mixed.test.":
		add("mixed.test. 60 IN A 203.0.113.5")
		add("mixed.test. 60 IN A 198.51.100.7")
	case name == "outside.test." && t == dns.TypeA:
		add("outside.test. 60 IN A 198.51.100.7")
	case name == "txt.test.":
		add(`txt.test. 60 IN TXT "hello"`)
	case name == "big.test.":
		if !tcp {
			m.Truncated = true
			break
		}
		for i := range bigAnswers {
			add(fmt.Sprintf("big.test. 60 IN A 192.0.2.%d", i+1))
		}
	case name == "fail.test.":
		m.Rcode = dns.RcodeServerFailure
	default:
		m.Rcode = dns.RcodeNameError
	}
	if r.IsEdns0() != nil {
		m.SetEdns0(4096, false)
	}
	w.WriteMsg(m)
}

// startTestZone serves a testZone on one port over UDP and TCP.
func startTestZone(t *testing.T) (*testZone, string) {
	t.Helper()
	z := &testZone{}
	pc, ln, err := listenSamePort("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: z}, {Listener: ln, Handler: z}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
		t.Cleanup(func() { s.Shutdown() })
	}
	return z, pc.LocalAddr().String()
}

func startTestDNS(t *testing.T, lk egressLookup, upstreams ...string) *dnsServer {
	t.Helper()
	d, err := startDNS(dnsConfig{Addr: "127.0.0.1:0", Upstreams: upstreams, Lookup: lk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// dnsQuery asks the server at port, from src, over netw ("udp" or
// "tcp"), with an EDNS0 buffer of ednsSize unless it is 0.
func dnsQuery(t *testing.T, port uint16, src, netw, name string, qtype uint16, ednsSize uint16) *dns.Msg {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	if ednsSize > 0 {
		q.SetEdns0(ednsSize, false)
	}
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	if netw == "udp" {
		dialer.LocalAddr = &net.UDPAddr{IP: net.ParseIP(src)}
	} else {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c := &dns.Client{Net: netw, Dialer: dialer, Timeout: 5 * time.Second, UDPSize: max(ednsSize, dns.MinMsgSize)}
	r, _, err := c.Exchange(q, fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("query %s %s over %s: %v", name, dns.TypeToString[qtype], netw, err)
	}
	return r
}

func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, rr.String())
	}
	return out
}

func TestDNSAnswers(t *testing.T) {
	zone, up := startTestZone(t)
	noMatch := `denyOut "0.0.0.0/0" and no allowOut domain matches`
	filtered := &netpolicy.Policy{AllowOut: []string{"203.0.113.0/24"}, DenyOut: []string{netpolicy.AllTrafficV4}}
	tests := []struct {
		name      string
		policy    *netpolicy.Policy
		qname     string
		qtype     uint16
		netw      string
		wantRcode int
		want      []string
		denial    *netpolicy.Denial
		noForward bool // the upstream must not be asked
	}{
		{
			name: "allowed", policy: domainsOnly("allowed.test"), qname: "allowed.test", qtype: dns.TypeA,
			wantRcode: dns.RcodeSuccess, want: []string{"allowed.test.\t60\tIN\tA\t192.0.2.1"},
		},
		{
			name: "allowed over TCP", policy: domainsOnly("allowed.test"), qname: "allowed.test", qtype: dns.TypeA, netw: "tcp",
			wantRcode: dns.RcodeSuccess, want: []string{"allowed.test.\t60\tIN\tA\t192.0.2.1"},
		},
		{
			name: "case and wildcard", policy: domainsOnly("*.test"), qname: "Allowed.TEST", qtype: dns.TypeA,
			wantRcode: dns.RcodeSuccess, want: []string{"allowed.test.\t60\tIN\tA\t192.0.2.1"},
		},
		{
			name: "refused", policy: domainsOnly("allowed.test"), qname: "other.test", qtype: dns.TypeA,
			wantRcode: dns.RcodeRefused, noForward: true,
			denial: &netpolicy.Denial{Kind: "dns", Destination: "other.test", Rule: noMatch},
		},
		{
			name: "NXDOMAIN passes through", policy: domainsOnly("missing.test"), qname: "missing.test", qtype: dns.TypeA,
			wantRcode: dns.RcodeNameError,
		},
		{
			name: "AAAA stripped", policy: domainsOnly("allowed.test"), qname: "allowed.test", qtype: dns.TypeAAAA,
			wantRcode: dns.RcodeSuccess,
		},
		{
			name: "CNAME kept, AAAA stripped", policy: domainsOnly("alias.test"), qname: "alias.test", qtype: dns.TypeAAAA,
			wantRcode: dns.RcodeSuccess, want: []string{"alias.test.\t60\tIN\tCNAME\tallowed.test."},
		},
		{
			name: "CNAME chain", policy: nil, qname: "alias.test", qtype: dns.TypeA,
			wantRcode: dns.RcodeSuccess, want: []string{"alias.test.\t60\tIN\tCNAME\tallowed.test.", "allowed.test.\t60\tIN\tA\t192.0.2.1"},
		},
		{
			name: "no policy answers anything", policy: nil, qname: "outside.test", qtype: dns.TypeA,
			wantRcode: dns.RcodeSuccess, want: []string{"outside.test.\t60\tIN\tA\t198.51.100.7"},
		},
		{
			name: "deny all with allowed addresses refuses even their names", policy: filtered, qname: "mixed.test", qtype: dns.TypeA,
			wantRcode: dns.RcodeRefused, noForward: true,
			denial: &netpolicy.Denial{Kind: "dns", Destination: "mixed.test", Rule: `denyOut "0.0.0.0/0" and no allowOut domain matches`},
		},
		{
			// A resolver that forwarded any name would be a tunnel out.
			name: "deny all with allowed addresses forwards no name", policy: filtered, qname: "txt.test", qtype: dns.TypeTXT,
			wantRcode: dns.RcodeRefused, noForward: true,
			denial: &netpolicy.Denial{Kind: "dns", Destination: "txt.test", Rule: `denyOut "0.0.0.0/0" and no allowOut domain matches`},
		},
		{
			name: "upstream failure", policy: nil, qname: "fail.test", qtype: dns.TypeA,
			wantRcode: dns.RcodeServerFailure,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, lk := newTestSandbox(t, "127.0.0.1", tt.policy)
			d := startTestDNS(t, lk, up)
			before := zone.queries.Load()
			netw := tt.netw
			if netw == "" {
				netw = "udp"
			}
			start := time.Now()
			r := dnsQuery(t, d.Port(), "127.0.0.1", netw, tt.qname, tt.qtype, 1232)
			if r.Rcode != tt.wantRcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.wantRcode])
			}
			if diff := cmp.Diff(tt.want, rrStrings(r.Answer)); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			for _, rr := range append(r.Ns, r.Extra...) {
				if rr.Header().Rrtype == dns.TypeAAAA {
					t.Errorf("an AAAA record got through: %v", rr)
				}
			}
			if tt.noForward {
				if n := zone.queries.Load() - before; n != 0 {
					t.Errorf("the upstream was asked %d times", n)
				}
				if el := time.Since(start); el > 500*time.Millisecond {
					t.Errorf("the refusal took %v", el)
				}
			}
			var want []netpolicy.Denial
			if tt.denial != nil {
				want = append(want, *tt.denial)
			}
			checkDenials(t, sb, want)
		})
	}
}

func TestDNSTruncation(t *testing.T) {
	zone, up := startTestZone(t)
	_, lk := newTestSandbox(t, "127.0.0.1", nil)
	d := startTestDNS(t, lk, up)

	// The upstream truncates over UDP: the server must ask again over TCP.
	r := dnsQuery(t, d.Port(), "127.0.0.1", "tcp", "big.test", dns.TypeA, 0)
	if len(r.Answer) != bigAnswers || r.Truncated {
		t.Errorf("over TCP: %d answers, truncated %v; want %d, not truncated", len(r.Answer), r.Truncated, bigAnswers)
	}
	if zone.tcpQueries.Load() == 0 {
		t.Error("the upstream was never asked over TCP")
	}
	// A client with a large enough EDNS0 buffer gets it all over UDP.
	r = dnsQuery(t, d.Port(), "127.0.0.1", "udp", "big.test", dns.TypeA, 4096)
	if len(r.Answer) != bigAnswers || r.Truncated {
		t.Errorf("over UDP with EDNS0: %d answers, truncated %v; want %d, not truncated", len(r.Answer), r.Truncated, bigAnswers)
	}
	// A plain UDP client gets at most 512 bytes, marked truncated.
	r = dnsQuery(t, d.Port(), "127.0.0.1", "udp", "big.test", dns.TypeA, 0)
	if !r.Truncated || len(r.Answer) >= bigAnswers {
		t.Errorf("over plain UDP: %d answers, truncated %v; want fewer than %d, truncated", len(r.Answer), r.Truncated, bigAnswers)
	}
	r.Compress = true
	if b, _ := r.Pack(); len(b) > dns.MinMsgSize {
		t.Errorf("plain UDP answer of %d bytes", len(b))
	}
}

func TestDNSUnknownSourceRefused(t *testing.T) {
	zone, up := startTestZone(t)
	_, lk := newTestSandbox(t, "127.0.0.1", nil)
	d := startTestDNS(t, lk, up)
	for _, netw := range []string{"udp", "tcp"} {
		r := dnsQuery(t, d.Port(), "127.0.0.2", netw, "allowed.test", dns.TypeA, 0)
		if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Errorf("%s: rcode %s with %d answers, want REFUSED", netw, dns.RcodeToString[r.Rcode], len(r.Answer))
		}
	}
	if n := zone.queries.Load(); n != 0 {
		t.Errorf("the upstream was asked %d times", n)
	}
}

func TestDNSUpstreamFallback(t *testing.T) {
	_, up := startTestZone(t)
	// Nothing listens on a port just freed.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := pc.LocalAddr().String()
	pc.Close()
	_, lk := newTestSandbox(t, "127.0.0.1", nil)

	d := startTestDNS(t, lk, dead, up)
	r := dnsQuery(t, d.Port(), "127.0.0.1", "udp", "allowed.test", dns.TypeA, 0)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("with a dead first upstream: rcode %s, %d answers", dns.RcodeToString[r.Rcode], len(r.Answer))
	}

	d = startTestDNS(t, lk, dead)
	r = dnsQuery(t, d.Port(), "127.0.0.1", "udp", "allowed.test", dns.TypeA, 0)
	if r.Rcode != dns.RcodeServerFailure {
		t.Errorf("with no live upstream: rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
}

func TestDNSConfigValidate(t *testing.T) {
	_, lk := newTestSandbox(t, "127.0.0.1", nil)
	tests := []struct {
		name    string
		cfg     dnsConfig
		wantErr bool
	}{
		{name: "ok", cfg: dnsConfig{Addr: "127.0.0.1:0", Upstreams: []string{"127.0.0.1:53"}, Lookup: lk}},
		{name: "no address", cfg: dnsConfig{Lookup: lk}, wantErr: true},
		{name: "no lookup", cfg: dnsConfig{Addr: "127.0.0.1:0"}, wantErr: true},
		{name: "upstream without port", cfg: dnsConfig{Addr: "127.0.0.1:0", Upstreams: []string{"127.0.0.1"}, Lookup: lk}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr != (err != nil) || err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Validate() = %v, want error %v of class ErrInvalidArgument", err, tt.wantErr)
			}
		})
	}
}

// TestDNSBindsAllowedNames checks that an answer for an allowed domain is
// remembered, so that the egress proxy admits that name at those
// addresses only.
func TestDNSBindsAllowedNames(t *testing.T) {
	_, up := startTestZone(t)
	sb, lk := newTestSandbox(t, "127.0.0.1", domainsOnly("allowed.test"))
	d := startTestDNS(t, lk, up)
	if r := dnsQuery(t, d.Port(), "127.0.0.1", "udp", "allowed.test", dns.TypeA, 1232); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	if !sb.boundTo("Allowed.Test.", netip.MustParseAddr("192.0.2.1")) {
		t.Error("the answer's address is not bound to the name")
	}
	if sb.boundTo("allowed.test", netip.MustParseAddr("192.0.2.2")) {
		t.Error("an address the answer did not hold is bound to the name")
	}
	if got := d.lookupA("allowed.test"); len(got) != 1 || got[0] != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("lookupA = %v", got)
	}
}

// TestDNSKeepsAAAAForIPv6Sandboxes checks that a sandbox with IPv6 gets
// AAAA answers, unless its policy checks domains (which runs on IPv4 only).
func TestDNSKeepsAAAAForIPv6Sandboxes(t *testing.T) {
	_, up := startTestZone(t)
	for _, tt := range []struct {
		name   string
		policy *netpolicy.Policy
		want   int
	}{
		{"open policy", nil, 1},
		{"domain policy", domainsOnly("allowed.test"), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sb, lk := newTestSandbox(t, "127.0.0.1", tt.policy)
			sb.addr6 = netip.MustParseAddr("fd74:7570:7065::2")
			d := startTestDNS(t, lk, up)
			r := dnsQuery(t, d.Port(), "127.0.0.1", "udp", "allowed.test", dns.TypeAAAA, 1232)
			got := 0
			for _, rr := range r.Answer {
				if rr.Header().Rrtype == dns.TypeAAAA {
					got++
				}
			}
			if got != tt.want {
				t.Errorf("%d AAAA records, want %d: %v", got, tt.want, r.Answer)
			}
		})
	}
}

// TestDNSOwnHostname checks that lookups of the sandbox's own name (its
// id, which /etc/hosts answers) are neither forwarded nor logged as
// refused, even under deny-all.
func TestDNSOwnHostname(t *testing.T) {
	zone, up := startTestZone(t)
	sb, lk := newTestSandbox(t, "127.0.0.1", &netpolicy.Policy{DenyOut: []string{"0.0.0.0/0"}})
	d := startTestDNS(t, lk, up)
	r := dnsQuery(t, d.Port(), "127.0.0.1", "udp", sb.id, dns.TypeAAAA, 1232)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Errorf("own hostname: rcode %s, answer %v", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if n := zone.queries.Load(); n != 0 {
		t.Errorf("the upstream was asked %d times", n)
	}
	checkDenials(t, sb, nil)
}
