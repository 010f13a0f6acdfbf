package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
)

// signInLink asks for a dashboard link with key and returns the link and
// its token.
func signInLink(t *testing.T, e *testEnv, key string) (string, string) {
	t.Helper()
	status, _, body := e.doKey(key, "POST", "/dashboard/links", "{}")
	if status != http.StatusCreated {
		t.Fatalf("POST /dashboard/links: %d %s", status, body)
	}
	var link dashboardLinkJSON
	if err := json.Unmarshal(body, &link); err != nil {
		t.Fatal(err)
	}
	_, token, ok := strings.Cut(link.URL, "#login=")
	if !ok {
		t.Fatalf("link %q has no token in its fragment", link.URL)
	}
	if left := time.Until(link.ExpiresAt); left <= 0 || left > loginLinkTTL {
		t.Errorf("link expires in %v, want within %v", left, loginLinkTTL)
	}
	return link.URL, token
}

// redeemToken trades token for a session and returns the status and the
// session's key.
func redeemToken(t *testing.T, e *testEnv, token string) (int, string) {
	t.Helper()
	status, s := redeem(t, e, token)
	return status, s.Key
}

func redeem(t *testing.T, e *testEnv, token string) (int, sessionJSON) {
	t.Helper()
	status, _, body := e.doKey("", "POST", "/dashboard/session", `{"token":"`+token+`"}`)
	var s sessionJSON
	json.Unmarshal(body, &s)
	return status, s
}

func TestDashboardSignInLink(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{"templateID":"base"}`)

	// Without a key there is no link.
	if status, _, _ := e.doKey("", "POST", "/dashboard/links", "{}"); status != http.StatusUnauthorized {
		t.Errorf("a link without a key: %d, want 401", status)
	}
	link, token := signInLink(t, e, e.key)
	if !strings.HasPrefix(link, e.http.URL+"/dashboard/#login=") {
		t.Errorf("link %q does not open %s/dashboard/", link, e.http.URL)
	}
	if raw, err := base64Len(token); err != nil || raw < 16 {
		t.Errorf("token %q: %d random bytes (%v), want at least 16", token, raw, err)
	}

	status, session := redeem(t, e, token)
	key := session.Key
	if status != http.StatusCreated || !strings.HasPrefix(key, "e2b_") || len(key) != 44 {
		t.Fatalf("redeem: %d, key %q; want 201 and a key shaped like an API key", status, key)
	}
	if left := time.Until(session.ExpiresAt); left <= sessionTTL-time.Minute || left > sessionTTL {
		t.Errorf("session expires in %v, want %v", left, sessionTTL)
	}
	// The session's key opens the control plane, in the key's team.
	status, _, body := e.doKey(key, "GET", "/sandboxes/"+sb.SandboxID, "")
	if status != http.StatusOK {
		t.Errorf("the session's key: %d %s", status, body)
	}
	// A link works once.
	if status, again := redeemToken(t, e, token); status != http.StatusUnauthorized || again != "" {
		t.Errorf("second use of a link: %d %q, want 401", status, again)
	}
	// A session cannot make links of its own, which would outlive it.
	if status, _, body := e.doKey(key, "POST", "/dashboard/links", "{}"); status != http.StatusForbidden {
		t.Errorf("a link made with a session's key: %d %s, want 403", status, body)
	}
	// Signing out ends the session; an API key is left be.
	for _, k := range []string{e.key, key} {
		if status, _, _ := e.doKey(k, "DELETE", "/dashboard/session", ""); status != http.StatusNoContent {
			t.Errorf("DELETE /dashboard/session: %d", status)
		}
	}
	if status, _, _ := e.doKey(key, "GET", "/v2/sandboxes", ""); status != http.StatusUnauthorized {
		t.Errorf("the key of an ended session: %d, want 401", status)
	}
	if status, _, _ := e.do("GET", "/v2/sandboxes", ""); status != http.StatusOK {
		t.Errorf("the API key after a sign-out sent with it: %d, want 200", status)
	}

	// Tokens nobody made, and bodies that are not JSON, get nothing.
	for _, body := range []string{`{"token":"` + strings.Repeat("A", 43) + `"}`, `{"token":""}`, `{}`, `not json`} {
		if status, _, _ := e.doKey("", "POST", "/dashboard/session", body); status != http.StatusUnauthorized && status != http.StatusBadRequest {
			t.Errorf("redeem %s: %d, want 401 or 400", body, status)
		}
	}
	// A form post, which any site can make a browser send, is refused
	// before the token is looked at.
	_, token = signInLink(t, e, e.key)
	resp, err := e.http.Client().Post(e.http.URL+"/dashboard/session", "text/plain", strings.NewReader(`{"token":"`+token+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("redeem as text/plain: %s, want 415", resp.Status)
	}
	if status, _ := redeemToken(t, e, token); status != http.StatusCreated {
		t.Errorf("the link refused as text/plain was used up: %d", status)
	}
}

func base64Len(s string) (int, error) {
	b, err := io.ReadAll(base64URLDecoder(s))
	return len(b), err
}

// TestDashboardSessionScope checks that a session acts as the key that
// asked for its link: another team's key gets a session of that team,
// which sees none of the first team's sandboxes.
func TestDashboardSessionScope(t *testing.T) {
	e := newTestEnv(t)
	mine := e.create(`{"templateID":"base"}`)
	otherKey, _, err := e.server.keys.CreateInTeam(context.Background(), "other", "other")
	if err != nil {
		t.Fatal(err)
	}
	status, _, body := e.doKey(otherKey, "POST", "/v2/sandboxes", `{"templateID":"base"}`)
	if status != http.StatusCreated {
		t.Fatalf("create in team other: %d %s", status, body)
	}
	var theirs sandboxJSON
	json.Unmarshal(body, &theirs)

	_, token := signInLink(t, e, otherKey)
	_, s := redeem(t, e, token)
	session := s.Key
	// The page learns whose the session is, to say so and to ask before a
	// link switches a signed-in tab to another team.
	if s.Team != "other" {
		t.Errorf("team other's session says team %q", s.Team)
	}
	for _, c := range []struct {
		key     string
		want    whoamiJSON
		comment string
	}{
		{session, whoamiJSON{Team: "other", Session: true}, "team other's session"},
		{otherKey, whoamiJSON{Team: "other"}, "team other's API key"},
		{e.key, whoamiJSON{Team: "default"}, "the default team's API key"},
	} {
		status, _, body := e.doKey(c.key, "GET", "/dashboard/whoami", "")
		var got whoamiJSON
		json.Unmarshal(body, &got)
		if status != http.StatusOK || got != c.want {
			t.Errorf("whoami with %s: %d %s, want %+v", c.comment, status, body, c.want)
		}
	}
	if status, _, _ := e.doKey("", "GET", "/dashboard/whoami", ""); status != http.StatusUnauthorized {
		t.Errorf("whoami without a key: %d, want 401", status)
	}
	if status, _, _ := e.doKey(session, "GET", "/sandboxes/"+theirs.SandboxID, ""); status != http.StatusOK {
		t.Errorf("team other's session on its own sandbox: %d", status)
	}
	if status, _, _ := e.doKey(session, "GET", "/sandboxes/"+mine.SandboxID, ""); status != http.StatusNotFound {
		t.Errorf("team other's session on the default team's sandbox: %d, want 404", status)
	}
	if status, _, _ := e.doKey(session, "DELETE", "/sandboxes/"+mine.SandboxID, ""); status != http.StatusNotFound {
		t.Errorf("team other's session killing the default team's sandbox: %d, want 404", status)
	}
}

// TestDashboardSessionEndsWithItsKey removes the API key a session was
// made with: the session ends with it.
func TestDashboardSessionEndsWithItsKey(t *testing.T) {
	e := newTestEnv(t)
	key, k, err := e.server.keys.Create(context.Background(), "short-lived")
	if err != nil {
		t.Fatal(err)
	}
	_, token := signInLink(t, e, key)
	_, session := redeemToken(t, e, token)
	if status, _, _ := e.doKey(session, "GET", "/v2/sandboxes", ""); status != http.StatusOK {
		t.Fatalf("the session: %d", status)
	}
	if err := e.server.keys.Remove(context.Background(), k.ID); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := e.doKey(session, "GET", "/v2/sandboxes", ""); status != http.StatusUnauthorized {
		t.Errorf("the session of a removed key: %d, want 401", status)
	}
}

// TestDashboardLinksExpire moves the clock past a link's and a session's
// lifetimes.
func TestDashboardLinksExpire(t *testing.T) {
	e := newTestEnv(t)
	now := time.Now()
	e.server.logins.mu.Lock()
	e.server.logins.now = func() time.Time { return now }
	e.server.logins.mu.Unlock()
	advance := func(d time.Duration) {
		e.server.logins.mu.Lock()
		now = now.Add(d)
		e.server.logins.mu.Unlock()
	}

	_, late := signInLink(t, e, e.key)
	_, token := signInLink(t, e, e.key)
	advance(loginLinkTTL - time.Second)
	status, key := redeemToken(t, e, token)
	if status != http.StatusCreated {
		t.Fatalf("a link used within its time: %d", status)
	}
	advance(2 * time.Second)
	if status, _ := redeemToken(t, e, late); status != http.StatusUnauthorized {
		t.Errorf("a link used after its time: %d, want 401", status)
	}
	advance(sessionTTL - 3*time.Second)
	if status, _, _ := e.doKey(key, "GET", "/v2/sandboxes", ""); status != http.StatusOK {
		t.Errorf("a session within its time: %d", status)
	}
	advance(2 * time.Second)
	if status, _, _ := e.doKey(key, "GET", "/v2/sandboxes", ""); status != http.StatusUnauthorized {
		t.Errorf("a session after its time: %d, want 401", status)
	}
}

// TestDashboardLinkOverSocket asks for a link over the local socket with
// no key: it points at Config.URL (a socket request names no address a
// browser could open) and signs in as the socket's peer, the default team.
func TestDashboardLinkOverSocket(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newTestEnv(t)
	e.server.cfg.URL = "http://127.0.0.1:3999"
	sb := e.create(`{"templateID":"base"}`)
	path := filepath.Join(t.TempDir(), "t.sock")
	sock, err := ListenSocket(path, SocketOptions{Group: "tupper-test-no-such-group"})
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, tcp, e.server, ListenOptions{Socket: sock}) }()
	defer func() {
		cancel()
		<-done
	}()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	resp, err := client.Post("http://tupper.localhost/dashboard/links", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var link dashboardLinkJSON
	if err := json.NewDecoder(resp.Body).Decode(&link); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("a link over the socket: %s, %v", resp.Status, err)
	}
	u, err := url.Parse(link.URL)
	if err != nil || u.Scheme+"://"+u.Host != e.server.cfg.URL || u.Path != "/dashboard/" {
		t.Fatalf("link %q, want one under %s/dashboard/", link.URL, e.server.cfg.URL)
	}
	_, token, _ := strings.Cut(u.Fragment, "login=")
	status, key := redeemToken(t, e, token)
	if status != http.StatusCreated {
		t.Fatalf("redeem: %d", status)
	}
	if status, _, _ := e.doKey(key, "GET", "/sandboxes/"+sb.SandboxID, ""); status != http.StatusOK {
		t.Errorf("the socket's session on the default team's sandbox: %d", status)
	}
}

func base64URLDecoder(s string) io.Reader {
	return base64.NewDecoder(base64.RawURLEncoding, strings.NewReader(s))
}

// TestDashboardPageIsOpen checks that the page itself needs no key (it
// asks for one), while everything else under /dashboard/ but the sign-in
// trade is the control plane's, behind its key.
func TestDashboardPageIsOpen(t *testing.T) {
	e := newTestEnv(t)
	status, hdr, _ := e.doKey("", "GET", "/dashboard/", "")
	if status != http.StatusOK && status != http.StatusServiceUnavailable || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Errorf("GET /dashboard/ without a key: %d %s, want the page (or the page saying it was not built)", status, hdr.Get("Content-Type"))
	}
	req, _ := http.NewRequest("GET", e.http.URL+"/dashboard", nil)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/dashboard/" {
		t.Errorf("GET /dashboard: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	for _, r := range []struct{ method, path string }{{"POST", "/dashboard/links"}, {"PUT", "/dashboard/app.js"}, {"GET", "/images"}} {
		if status, _, body := e.doKey("", r.method, r.path, "{}"); status != http.StatusUnauthorized {
			t.Errorf("%s %s without a key: %d %s, want 401", r.method, r.path, status, body)
		}
	}
}

// TestDashboardLinkFloodStaysInItsTeam has a team's key ask for more links
// and sessions than the daemon holds for one team: the operator can still
// sign in, and the flooding team loses only its own oldest links and
// sessions, never another team's.
func TestDashboardLinkFloodStaysInItsTeam(t *testing.T) {
	e := newTestEnv(t)
	flooder, _, err := e.server.keys.CreateInTeam(context.Background(), "flood", "flood")
	if err != nil {
		t.Fatal(err)
	}
	_, operatorToken := signInLink(t, e, e.key)
	_, operatorSession := redeemToken(t, e, operatorToken)

	_, firstToken := signInLink(t, e, flooder)
	_, firstSession := redeemToken(t, e, firstToken)
	_, oldLink := signInLink(t, e, flooder)
	for range maxLoginLinks {
		signInLink(t, e, flooder)
	}
	if status, _ := redeemToken(t, e, oldLink); status != http.StatusUnauthorized {
		t.Errorf("the flooding team's oldest link, past the team's %d: %d, want 401 (it gave way)", maxLoginLinks, status)
	}
	for i := range maxSessions {
		_, token := signInLink(t, e, flooder)
		if status, _ := redeemToken(t, e, token); status != http.StatusCreated {
			t.Fatalf("session %d of the flooding team: %d", i, status)
		}
	}
	if status, _, _ := e.doKey(firstSession, "GET", "/v2/sandboxes", ""); status != http.StatusUnauthorized {
		t.Errorf("the flooding team's oldest session, past the team's %d: %d, want 401 (it gave way)", maxSessions, status)
	}

	// The other team signs in as before, and keeps its session.
	_, token := signInLink(t, e, e.key)
	status, session := redeemToken(t, e, token)
	if status != http.StatusCreated {
		t.Fatalf("the operator's sign-in after another team's flood: %d", status)
	}
	for _, k := range []string{operatorSession, session} {
		if status, _, _ := e.doKey(k, "GET", "/v2/sandboxes", ""); status != http.StatusOK {
			t.Errorf("the operator's session after another team's flood: %d", status)
		}
	}
	e.server.logins.mu.Lock()
	links, sessions := len(e.server.logins.links), len(e.server.logins.sessions)
	e.server.logins.mu.Unlock()
	if links > 2*maxLoginLinks || sessions > 2*maxSessions {
		t.Errorf("the daemon holds %d links and %d sessions for two teams, want at most %d and %d", links, sessions, 2*maxLoginLinks, 2*maxSessions)
	}
}
