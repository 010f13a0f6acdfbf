package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/proto"
)

func TestAPIKeyRequired(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		name string
		key  string
		want int
	}{
		{name: "no key", key: "", want: http.StatusUnauthorized},
		{name: "malformed key", key: "sk-not-a-key", want: http.StatusUnauthorized},
		{name: "unknown key", key: "e2b_" + strings.Repeat("0", 40), want: http.StatusUnauthorized},
		{name: "valid key", key: e.key, want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/v2/sandboxes", "/sandboxes"} {
				status, hdr, body := e.doKey(tt.key, "GET", path, "")
				if status != tt.want {
					t.Fatalf("GET %s: %d %s, want %d", path, status, body, tt.want)
				}
				if hdr.Get("Content-Type") != "application/json" {
					t.Errorf("Content-Type %q", hdr.Get("Content-Type"))
				}
				if status == http.StatusUnauthorized {
					var ae apiError
					if err := json.Unmarshal(body, &ae); err != nil || ae.Code != 401 || ae.Message == "" {
						t.Errorf("401 body %s: want {code:401, message}", body)
					}
				}
			}
		})
	}
	// Without a key nothing is created either.
	if status, _, _ := e.doKey("", "POST", "/v2/sandboxes", `{"templateID":"base"}`); status != http.StatusUnauthorized {
		t.Errorf("create without a key: %d", status)
	}
	if ids := e.engine.Running(); len(ids) != 0 {
		t.Errorf("sandboxes running after unauthenticated creates: %v", ids)
	}
}

func TestControlPlaneRoundTrip(t *testing.T) {
	e := newTestEnv(t)

	// Create, the way SDK 2.51 does.
	sb := e.create(`{"templateID":"base","timeout":300,"metadata":{"owner":"alice","suite":"rt"},"envVars":{"A":"1"},
		"autoPause":false,"secure":true,"allow_internet_access":true,"mcp":null,"someFutureField":{"x":1}}`)
	if sb.TemplateID != "base" || len(sb.SandboxID) != 20 || sb.ClientID != "tupper" || sb.EnvdVersion != proto.EnvdVersion ||
		sb.EnvdAccessToken == "" || sb.Domain != "tupper.test" || sb.TrafficAccessToken != nil {
		t.Errorf("create answered %+v", sb)
	}
	// The raw answer carries every field the Python SDK requires.
	_, _, raw := e.do("GET", "/sandboxes/"+sb.SandboxID, "")
	var detail map[string]any
	if err := json.Unmarshal(raw, &detail); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"templateID", "sandboxID", "clientID", "startedAt", "endAt", "cpuCount", "memoryMB",
		"diskSizeMB", "state", "envdVersion", "domain", "envdAccessToken", "metadata", "lifecycle", "volumeMounts"} {
		if _, ok := detail[f]; !ok {
			t.Errorf("GET /sandboxes/{id} lacks %q: %s", f, raw)
		}
	}
	var d sandboxDetailJSON
	json.Unmarshal(raw, &d)
	if d.State != "running" || d.Metadata["owner"] != "alice" || d.EnvdAccessToken != sb.EnvdAccessToken ||
		d.AllowInternetAccess == nil || !*d.AllowInternetAccess || d.Lifecycle.OnTimeout != "kill" {
		t.Errorf("detail = %s", raw)
	}
	if left := time.Until(d.EndAt); left < 290*time.Second || left > 301*time.Second {
		t.Errorf("endAt %v is %v away, want about 300 s", d.EndAt, left)
	}
	if d.DiskSizeMB != 10240 {
		t.Errorf("diskSizeMB = %d, want the default 10240", d.DiskSizeMB)
	}
	// Tupper's extension: the disk cap, as the listing names it.
	sized := e.create(`{"diskSizeMB":2048}`)
	_, _, raw = e.do("GET", "/sandboxes/"+sized.SandboxID, "")
	if err := json.Unmarshal(raw, &d); err != nil || d.DiskSizeMB != 2048 {
		t.Errorf("a create of diskSizeMB 2048 is described as %s", raw)
	}
	e.do("DELETE", "/sandboxes/"+sized.SandboxID, "")

	// Python (≤ 2.50) creates through the v1 path.
	other := struct{ sandboxJSON }{}
	status, _, body := e.do("POST", "/sandboxes", `{"templateID":"other","metadata":{"owner":"bob"}}`)
	if status != http.StatusCreated {
		t.Fatalf("POST /sandboxes: %d %s", status, body)
	}
	json.Unmarshal(body, &other)
	if other.TemplateID != "other" {
		t.Errorf("v1 create: %s", body)
	}

	// List, filtered by metadata.
	list := func(query string) ([]listedSandboxJSON, string) {
		t.Helper()
		status, hdr, body := e.do("GET", "/v2/sandboxes?"+query, "")
		if status != http.StatusOK {
			t.Fatalf("list ?%s: %d %s", query, status, body)
		}
		var out []listedSandboxJSON
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatalf("list body %s: %v", body, err)
		}
		return out, hdr.Get("X-Next-Token")
	}
	ids := func(l []listedSandboxJSON) []string {
		var out []string
		for _, s := range l {
			out = append(out, s.SandboxID)
		}
		return out
	}
	all, _ := list("")
	if got := ids(all); !slices.Contains(got, sb.SandboxID) || !slices.Contains(got, other.SandboxID) || len(got) != 2 {
		t.Errorf("list all = %v", got)
	}
	// The JS SDK encodes each key and value, then the pairs, then the
	// parameter; Python encodes the pairs once.
	jsMetadata := url.Values{"metadata": {"owner=alice&suite=rt"}}.Encode()
	pyMetadata := url.Values{"metadata": {url.Values{"owner": {"alice"}}.Encode()}}.Encode()
	for _, q := range []string{jsMetadata, pyMetadata, "state=running&" + pyMetadata, "state=running,paused&" + jsMetadata} {
		if got := ids(first(list(q))); !cmp.Equal(got, []string{sb.SandboxID}) {
			t.Errorf("list ?%s = %v, want just %s", q, got, sb.SandboxID)
		}
	}
	if got := first(list("state=paused")); len(got) != 0 {
		t.Errorf("list of paused sandboxes = %v", ids(got))
	}
	if got := ids(first(list("template=other"))); !cmp.Equal(got, []string{other.SandboxID}) {
		t.Errorf("list ?template=other = %v", got)
	}

	// Pages.
	var paged []string
	for range 3 {
		paged = append(paged, e.create(`{"templateID":"base","metadata":{"suite":"page"}}`).SandboxID)
	}
	q := url.Values{"metadata": {"suite=page"}, "limit": {"2"}}
	page1, next := list(q.Encode())
	if len(page1) != 2 || next == "" {
		t.Fatalf("page 1: %v, next %q; want 2 and a token", ids(page1), next)
	}
	q.Set("nextToken", next)
	page2, next2 := list(q.Encode())
	if len(page2) != 1 || next2 != "" {
		t.Fatalf("page 2: %v, next %q; want 1 and no token", ids(page2), next2)
	}
	got := append(ids(page1), ids(page2)...)
	slices.Sort(got)
	slices.Sort(paged)
	if !cmp.Equal(got, paged) {
		t.Errorf("pages hold %v, want %v", got, paged)
	}
	// With a filter the engine does not know, pages stay full.
	q = url.Values{"template": {"base"}, "limit": {"2"}}
	tp1, tnext := list(q.Encode())
	q.Set("nextToken", tnext)
	tp2, tnext2 := list(q.Encode())
	if len(tp1) != 2 || tnext == "" || len(tp2) != 2 || tnext2 != "" {
		t.Errorf("template pages: %v (%q), %v (%q); want 2+2 base sandboxes", ids(tp1), tnext, ids(tp2), tnext2)
	}

	// Timeout.
	if status, _, body := e.do("POST", "/sandboxes/"+sb.SandboxID+"/timeout", `{"timeout":3600}`); status != http.StatusNoContent {
		t.Errorf("timeout: %d %s", status, body)
	}
	_, _, raw = e.do("GET", "/sandboxes/"+sb.SandboxID, "")
	json.Unmarshal(raw, &d)
	if left := time.Until(d.EndAt); left < 3590*time.Second {
		t.Errorf("after timeout 3600 the sandbox ends in %v", left)
	}
	if status, _, _ := e.do("POST", "/sandboxes/nosuchsandbox/timeout", `{"timeout":10}`); status != http.StatusNotFound {
		t.Errorf("timeout of an unknown sandbox: %d", status)
	}

	// Connect, both paths.
	for _, p := range []string{"/sandboxes/", "/v2/sandboxes/"} {
		status, _, body := e.do("POST", p+sb.SandboxID+"/connect", `{"timeout":60}`)
		var c sandboxJSON
		json.Unmarshal(body, &c)
		if status != http.StatusOK || c.SandboxID != sb.SandboxID || c.EnvdAccessToken != sb.EnvdAccessToken {
			t.Errorf("connect via %s: %d %s", p, status, body)
		}
	}

	// The fake backend cannot checkpoint, so it cannot pause; resume of a
	// running sandbox is a conflict.
	status, _, body = e.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", `{}`)
	var ae apiError
	json.Unmarshal(body, &ae)
	if status != http.StatusNotImplemented || ae.Code != 501 || !strings.Contains(ae.Message, "the fake backend cannot checkpoint") {
		t.Errorf("pause: %d %s", status, body)
	}
	if status, _, body := e.do("POST", "/sandboxes/"+sb.SandboxID+"/resume", `{}`); status != http.StatusConflict {
		t.Errorf("resume of a running sandbox: %d %s", status, body)
	}

	// Kill, twice.
	if status, _, body := e.do("DELETE", "/sandboxes/"+sb.SandboxID, ""); status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", status, body)
	}
	status, _, body = e.do("DELETE", "/sandboxes/"+sb.SandboxID, "")
	json.Unmarshal(body, &ae)
	if status != http.StatusNotFound || ae.Code != 404 {
		t.Errorf("second kill: %d %s, want 404 {code:404}", status, body)
	}
	for _, req := range [][2]string{{"GET", ""}, {"POST", "/connect"}, {"POST", "/pause"}, {"GET", "/metrics"}} {
		if status, _, body := e.do(req[0], "/sandboxes/"+sb.SandboxID+req[1], "{}"); status != http.StatusNotFound {
			t.Errorf("%s %s after kill: %d %s, want 404", req[0], req[1], status, body)
		}
	}
	if got := ids(first(list(""))); slices.Contains(got, sb.SandboxID) {
		t.Errorf("the killed sandbox is still listed: %v", got)
	}
}

func first[A, B any](a A, _ B) A { return a }

func TestMalformedRequests(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{}`)
	tests := []struct {
		name, method, path, body string
		want                     int
		msg                      string
	}{
		{name: "create: broken JSON", method: "POST", path: "/v2/sandboxes", body: `{"templateID":`, want: 400, msg: "not valid JSON"},
		{name: "create: not an object", method: "POST", path: "/v2/sandboxes", body: `["base"]`, want: 400, msg: "must be a JSON object"},
		{name: "create: two values", method: "POST", path: "/v2/sandboxes", body: `{} {}`, want: 400, msg: "more than one JSON value"},
		{name: "create: timeout a string", method: "POST", path: "/v2/sandboxes", body: `{"timeout":"5m"}`, want: 400, msg: `"timeout" must be a number`},
		{name: "create: metadata not strings", method: "POST", path: "/v2/sandboxes", body: `{"metadata":{"a":1}}`, want: 400, msg: "metadata"},
		{name: "create: negative timeout", method: "POST", path: "/v2/sandboxes", body: `{"timeout":-1}`, want: 400, msg: "negative"},
		{name: "create: timeout above the maximum", method: "POST", path: "/v2/sandboxes", body: `{"timeout":172800}`, want: 400, msg: "maximum"},
		{name: "create: absurd timeout", method: "POST", path: "/v2/sandboxes", body: `{"timeout":1e300}`, want: 400, msg: "too long"},
		{name: "create: bad env name", method: "POST", path: "/v2/sandboxes", body: `{"envVars":{"A B":"x"}}`, want: 400, msg: "environment variable"},
		{name: "create: unknown template", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"nosuch"}`, want: 404, msg: "nosuch"},
		{name: "create: bad allowOut", method: "POST", path: "/v2/sandboxes", body: `{"network":{"allowOut":["not a host!"]}}`, want: 400, msg: "allowOut[0]"},
		{name: "create: domain in denyOut", method: "POST", path: "/v2/sandboxes", body: `{"network":{"denyOut":["example.com"]}}`, want: 400, msg: "denyOut takes no domain"},
		{name: "create: disk above the maximum", method: "POST", path: "/v2/sandboxes", body: `{"diskSizeMB":1048576}`, want: 400, msg: "above this server's maximum of 102400 MB"},
		{name: "create: disk too small", method: "POST", path: "/v2/sandboxes", body: `{"diskSizeMB":1}`, want: 400, msg: "below the 32 MB"},
		{name: "create: negative disk", method: "POST", path: "/v2/sandboxes", body: `{"diskSizeMB":-1}`, want: 400, msg: "diskSizeMB"},
		{name: "create: an unknown volume", method: "POST", path: "/v2/sandboxes", body: `{"volumeMounts":[{"name":"v","path":"/data"}]}`, want: 404, msg: `volume "v" does not exist`},
		{name: "timeout: missing", method: "POST", path: "/sandboxes/" + sb.SandboxID + "/timeout", body: `{}`, want: 400, msg: `{"timeout": <seconds>}`},
		{name: "timeout: zero", method: "POST", path: "/sandboxes/" + sb.SandboxID + "/timeout", body: `{"timeout":0}`, want: 400, msg: "at least 1 second"},
		{name: "timeout: broken", method: "POST", path: "/sandboxes/" + sb.SandboxID + "/timeout", body: `{"timeout":}`, want: 400, msg: "not valid JSON"},
		{name: "connect: broken", method: "POST", path: "/sandboxes/" + sb.SandboxID + "/connect", body: `{`, want: 400, msg: "not valid JSON"},
		{name: "network: broken", method: "PUT", path: "/sandboxes/" + sb.SandboxID + "/network", body: `{"allowOut":"x"}`, want: 400, msg: "allowOut"},
		{name: "list: limit too big", method: "GET", path: "/v2/sandboxes?limit=101", want: 400, msg: "limit"},
		{name: "list: bad state", method: "GET", path: "/v2/sandboxes?state=dead", want: 400, msg: "state"},
		{name: "list: bad token", method: "GET", path: "/v2/sandboxes?nextToken=@@", want: 400, msg: "token"},
		{name: "list: bad metadata", method: "GET", path: "/v2/sandboxes?metadata=%3Dx", want: 400, msg: "empty key"},
		{name: "metrics: bad start", method: "GET", path: "/sandboxes/" + sb.SandboxID + "/metrics?start=yesterday", want: 400, msg: "start"},
		{name: "unknown path", method: "GET", path: "/nope", want: 404, msg: "no such endpoint"},
		{name: "wrong method", method: "PATCH", path: "/sandboxes/" + sb.SandboxID, want: 405, msg: "not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := e.do(tt.method, tt.path, tt.body)
			var ae apiError
			if err := json.Unmarshal(body, &ae); err != nil {
				t.Fatalf("%d %s: the body is not a JSON error", status, body)
			}
			if status != tt.want || ae.Code != tt.want || !strings.Contains(ae.Message, tt.msg) {
				t.Errorf("%s %s %s: %d %s; want %d mentioning %q", tt.method, tt.path, tt.body, status, body, tt.want, tt.msg)
			}
		})
	}
	// Nothing above made a sandbox.
	if ids := e.engine.Running(); len(ids) != 1 {
		t.Errorf("running after the bad creates: %v, want only %s", ids, sb.SandboxID)
	}
}

func TestNetworkPolicy(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{"network":{"allowOut":["Example.COM","*.pypi.org","10.0.0.0/8"],"denyOut":["0.0.0.0/0"]}}`)
	detail := func() sandboxDetailJSON {
		t.Helper()
		_, _, raw := e.do("GET", "/sandboxes/"+sb.SandboxID, "")
		var d sandboxDetailJSON
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	want := &netpolicy.Policy{AllowOut: []string{"example.com", "*.pypi.org", "10.0.0.0/8"}, DenyOut: []string{"0.0.0.0/0"}}
	if d := cmp.Diff(want, detail().Network); d != "" {
		t.Errorf("network after create (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want, e.backend.network(sb.SandboxID)); d != "" {
		t.Errorf("network the backend enforces after create (-want +got):\n%s", d)
	}
	status, _, body := e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", `{"denyOut":["192.168.1.7"],"allow_internet_access":false}`)
	if status != http.StatusNoContent {
		t.Fatalf("update network: %d %s", status, body)
	}
	d := detail()
	if diff := cmp.Diff(&netpolicy.Policy{DenyOut: []string{"192.168.1.7"}}, d.Network); diff != "" || d.AllowInternetAccess == nil || *d.AllowInternetAccess {
		t.Errorf("network after update: %+v, allowInternetAccess %v\n%s", d.Network, d.AllowInternetAccess, diff)
	}
	// allow_internet_access false is enforced as a deny-all beside the
	// policy's own entries.
	if diff := cmp.Diff(&netpolicy.Policy{DenyOut: []string{"192.168.1.7", "0.0.0.0/0", "::/0"}}, e.backend.network(sb.SandboxID)); diff != "" {
		t.Errorf("network the backend enforces after update (-want +got):\n%s", diff)
	}
	status, _, body = e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", `{"egressProxy":{"address":"proxy.example.com:1080"}}`)
	if status != http.StatusNotImplemented || !strings.Contains(string(body), "SOCKS5") {
		t.Errorf("egressProxy: %d %s", status, body)
	}
	status, _, body = e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", `{"denyOut":["example.com"]}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), "denyOut[0]") {
		t.Errorf("a domain in denyOut: %d %s", status, body)
	}
	// Header values of rules are secrets: enforced, never shown again.
	status, _, body = e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", `{"rules":{"api.x.io":[{"transform":{"headers":{"Authorization":"Bearer sk-TOPSECRET"}}}]}}`)
	if status != http.StatusNoContent {
		t.Fatalf("update with rules: %d %s", status, body)
	}
	if got := e.backend.network(sb.SandboxID); got.Rules["api.x.io"][0].Transform.Headers["Authorization"] != "Bearer sk-TOPSECRET" {
		t.Errorf("the backend did not get the rule's header: %+v", got.Rules)
	}
	_, _, raw := e.do("GET", "/sandboxes/"+sb.SandboxID, "")
	if strings.Contains(string(raw), "TOPSECRET") || !strings.Contains(string(raw), `"Authorization":"[redacted]"`) {
		t.Errorf("details show the secret or not the header: %s", raw)
	}
	status, _, body = e.do("GET", "/sandboxes/"+sb.SandboxID+"/network/denials", "")
	if status != http.StatusOK || !strings.Contains(string(body), `"destination":"blocked.test"`) {
		t.Errorf("denials: %d %s", status, body)
	}
	if status, _, _ := e.do("PUT", "/sandboxes/nosuch/network", `{}`); status != http.StatusNotFound {
		t.Errorf("update network of an unknown sandbox: %d", status)
	}
}

// TestCreateOptionsKeptInRecord checks that what a create says of E2B's
// secure and autoPause lands in the engine's one record of the sandbox
// (there is no second, server-side store to lose it).
func TestCreateOptionsKeptInRecord(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{"templateID":"base","secure":true,"autoPause":true}`)
	rec, err := e.engine.Get(context.Background(), sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Secure == nil || !*rec.Secure || !rec.AutoPause {
		t.Errorf("record keeps secure=%v autoPause=%v, want both true", rec.Secure, rec.AutoPause)
	}
	plain := e.create(`{"templateID":"base"}`)
	if rec, err := e.engine.Get(context.Background(), plain.SandboxID); err != nil || rec.Secure != nil || rec.AutoPause {
		t.Errorf("a create that says nothing: record %+v, %v", rec, err)
	}
}
