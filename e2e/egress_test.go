package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/network"
	"github.com/lightbearco/tupper/sdk"
)

// TestEgress checks the network policy end to end against a fake internet
// in a namespace of the test's own (internal/testutil.FakeInternet): the
// published e2b JS SDK through e2b/egress.mjs, then the Go SDK and the CLI.
func TestEgress(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a dozen gVisor sandboxes")
	}
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	npmCI(t, dir)
	fake, caFile := startFakeInternet(t)
	// Destinations that must stay unreachable, owned by the test so that
	// a broken firewall sends nothing beyond this machine.
	private := netip.MustParseAddr("10.254.99.1")
	fake.Own(t, private, 8080)
	fake.Own(t, netip.MustParseAddr("169.254.169.254"), 80)
	// A service of the host's, on every address.
	hostLn, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, hostPort, _ := net.SplitHostPort(hostLn.Addr().String())

	d := startServeDaemon(t, "--dns-upstream", fake.DNS.String(), "--upstream-ca", caFile)
	secret := "tupper-secret-" + randomHex(t)
	// Sandboxes get IPv6 when the host has an IPv6 route out; the
	// scenario then checks it too.
	var v6env []string
	if network.HostHasIPv6Route() {
		v6env = append(v6env, "FAKE_A6="+fake.HostA6.String())
		if h := hostIPv6(t); h.IsValid() {
			v6env = append(v6env, "HOST6="+h.String())
		}
	} else {
		t.Log("the host has no IPv6 route out: sandboxes are IPv4 only, and the scenario checks that IPv6 fails at once")
	}
	t.Run("e2b@2.51.0", func(t *testing.T) {
		runScript(t, node, dir, d, "egress.mjs", "e2b@2.51.0", append([]string{
			"FAKE_A=" + fake.HostA.String(), "FAKE_B=" + fake.HostB.String(), "FAKE_CA=" + caFile,
			"HOST_PORT=" + hostPort, "PRIVATE_ADDR=" + private.String() + ":8080", "SECRET=" + secret}, v6env...)...)
		found := false
		for _, r := range fake.Requests() {
			if r.Header.Get("X-Api-Key") == secret {
				found = true
				if r.SNI != "api.allowed.test" || r.Host != "api.allowed.test" {
					t.Errorf("the header reached %s (SNI %q, Host %q)", r.Server, r.SNI, r.Host)
				}
			}
		}
		if !found {
			t.Error("no request to the fake internet carried the injected header")
		}
	})

	t.Run("go-sdk", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: d.URL, APIKey: d.Key})
		if err != nil {
			t.Fatal(err)
		}
		client := &sdk.Client{Transport: tr}
		no := false
		sb, err := client.Create(ctx, sdk.CreateOptions{AllowInternetAccess: &no})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Kill(context.WithoutCancel(ctx))
		url := "http://" + fake.HostA.String() + "/"
		curl := "curl -sS --max-time 10 " + url
		if _, err := sb.Commands.Run(ctx, curl); err == nil {
			t.Fatalf("%s was reached with allowInternetAccess false", url)
		}
		if _, err := sb.Commands.Run(ctx, "getent hosts api.allowed.test"); err == nil {
			t.Error("a lookup was answered with allowInternetAccess false")
		}
		denials, err := sb.NetworkDenials(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var sawDNS, sawConnect bool
		for _, dn := range denials {
			sawDNS = sawDNS || (dn.Kind == "dns" && dn.Destination == "api.allowed.test" && strings.Contains(dn.Rule, "denyOut"))
			sawConnect = sawConnect || (dn.Kind == "connect" && dn.Destination == fake.HostA.String()+":80" && strings.Contains(dn.Rule, "denyOut"))
		}
		if !sawDNS || !sawConnect {
			t.Errorf("denials %+v: want the refused lookup and the refused connection, each with its rule", denials)
		}
		// The CLI shows them too.
		out := newTupperCLI(t, d, d.Key).ok(t, nil, "network", "log", sb.ID())
		if !strings.Contains(out, "api.allowed.test") || !strings.Contains(out, "denyOut") {
			t.Errorf("tupper network log:\n%s", out)
		}
		// A live update opens the internet again.
		yes := true
		if err := sb.SetNetwork(ctx, nil, &yes); err != nil {
			t.Fatal(err)
		}
		res, err := sb.Commands.Run(ctx, curl)
		if err != nil || !strings.Contains(res.Stdout, "hello from") {
			t.Fatalf("after opening the network: %+v, %v", res, err)
		}
		info, err := sb.GetInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.AllowInternetAccess == nil || !*info.AllowInternetAccess {
			t.Errorf("info after update: allowInternetAccess %v", info.AllowInternetAccess)
		}
		// And the CLI closes one range.
		newTupperCLI(t, d, d.Key).ok(t, nil, "network", sb.ID(), "--deny-out", fake.HostA.String()+"/32")
		if _, err := sb.Commands.Run(ctx, curl); err == nil {
			t.Errorf("%s was reached after tupper network --deny-out", url)
		}
	})

	// A daemon killed and started again enforces the policies of the
	// sandboxes it re-attaches to, with its new resolver and proxy.
	t.Run("restart", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		client := func() *sdk.Client {
			tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: d.URL, APIKey: d.Key})
			if err != nil {
				t.Fatal(err)
			}
			return &sdk.Client{Transport: tr}
		}
		sb, err := client().Create(ctx, sdk.CreateOptions{Network: &sdk.NetworkPolicy{
			AllowOut: []string{"api.allowed.test"}, DenyOut: []string{sdk.DenyAllTraffic, "::/0"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		id := sb.ID()
		check := func(when string) {
			t.Helper()
			sb, err := client().Connect(ctx, id)
			if err != nil {
				t.Fatalf("%s: connect: %v", when, err)
			}
			if res, err := sb.Commands.Run(ctx, "curl -sS --max-time 10 http://api.allowed.test/"); err != nil || !strings.Contains(res.Stdout, "hello from") {
				t.Errorf("%s: the allowed name: %+v, %v", when, res, err)
			}
			if _, err := sb.Commands.Run(ctx, "curl -sS --max-time 10 http://"+fake.HostB.String()+"/"); err == nil {
				t.Errorf("%s: a denied address was reached", when)
			}
			// IPv6 is denied (or, on a host without it, has no route): it
			// fails at once.
			res, err := sb.Commands.Run(ctx, `python3 -c 'import socket; socket.create_connection(("2001:db8::10", 80), timeout=5)'`)
			if err == nil || !(strings.Contains(errorText(err), "unreachable") || strings.Contains(errorText(err), "refused")) {
				t.Errorf("%s: IPv6 connect: %+v, %v", when, res, err)
			}
		}
		check("before the restart")
		d.crash(t)
		d.start(t)
		check("after the restart")
		if err := client().Kill(ctx, id); err != nil {
			t.Error(err)
		}
	})
}

// hostIPv6 returns a global IPv6 address of the host's own (not a
// sandbox's veth), or the zero Addr.
func hostIPv6(t *testing.T) netip.Addr {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, network.DefaultIfPrefix) || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Is6() && !ip.Is4In6() && !ip.IsLinkLocalUnicast() {
					return ip
				}
			}
		}
	}
	return netip.Addr{}
}

// errorText returns err's message, or "" for nil.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func randomHex(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// startFakeInternet starts the fake internet (testutil.FakeInternet) and
// writes its CA to a file, for tupper serve's --upstream-ca.
func startFakeInternet(t *testing.T) (*testutil.FakeInternet, string) {
	t.Helper()
	fake := testutil.StartFakeInternet(t)
	caFile := filepath.Join(t.TempDir(), "fake-ca.pem")
	if err := os.WriteFile(caFile, fake.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return fake, caFile
}
