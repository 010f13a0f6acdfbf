package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSocketTrusts(t *testing.T) {
	withGroup := socketTrust{path: "/run/tupper.sock", group: "tupper", gid: 990, hasGroup: true}
	noGroup := socketTrust{path: "/run/tupper.sock", group: "tupper"}
	tests := []struct {
		name  string
		trust socketTrust
		peer  Peer
		want  bool
	}{
		{name: "root", trust: withGroup, peer: Peer{UID: 0, GID: 0}, want: true},
		{name: "root without the group", trust: noGroup, peer: Peer{UID: 0, GID: 0}, want: true},
		{name: "root with another primary group", trust: withGroup, peer: Peer{UID: 0, GID: 1000}, want: true},
		{name: "primary group", trust: withGroup, peer: Peer{UID: 1000, GID: 990}, want: true},
		{name: "supplementary group", trust: withGroup, peer: Peer{UID: 1000, GID: 1000, Groups: []uint32{27, 990}}, want: true},
		{name: "other groups", trust: withGroup, peer: Peer{UID: 1000, GID: 1000, Groups: []uint32{27, 100}}},
		{name: "no groups known", trust: withGroup, peer: Peer{UID: 1000, GID: 1000}},
		{name: "nobody", trust: withGroup, peer: Peer{UID: 65534, GID: 65534}},
		{name: "group absent: a gid that would match is not enough", trust: noGroup, peer: Peer{UID: 1000, GID: 0, Groups: []uint32{0}}},
		{name: "credentials unknown", trust: withGroup, peer: Peer{Err: errors.New("no SO_PEERCRED")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.trust.trusts(tt.peer); got != tt.want {
				t.Errorf("trusts(%+v) = %v, want %v", tt.peer, got, tt.want)
			}
		})
	}
}

func TestParseProcStatus(t *testing.T) {
	const status = "Name:\tbash\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n" +
		"Uid:\t1000\t1001\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nFDSize:\t256\nGroups:\t4 27 990 \nNStgid:\t4242\n"
	got := parseProcStatus(status)
	want := procStatus{euid: 1001, ok: true, groups: []uint32{4, 27, 990}}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(procStatus{})); d != "" {
		t.Errorf("parseProcStatus (-want +got):\n%s", d)
	}
	if got := parseProcStatus("Uid:\t0\t0\t0\t0\nGroups:\t\n"); !got.ok || got.euid != 0 || len(got.groups) != 0 {
		t.Errorf("root without supplementary groups: %+v", got)
	}
	if got := parseProcStatus(""); got.ok {
		t.Errorf("an empty status names a uid: %+v", got)
	}
}

func TestSocketRefusal(t *testing.T) {
	withGroup := socketTrust{path: "/run/tupper-x.sock", group: "tupper", gid: 990, hasGroup: true}
	noGroup := socketTrust{path: "/run/tupper-x.sock", group: "tupper"}
	tests := []struct {
		name  string
		trust socketTrust
		peer  Peer
		user  string
		want  []string
	}{
		{name: "named user", trust: withGroup, peer: Peer{UID: 1000}, user: "alice",
			want: []string{"/run/tupper-x.sock", "user alice (uid 1000)", "group tupper", "usermod -aG tupper alice", "run as root", "API key"}},
		{name: "unnamed user", trust: withGroup, peer: Peer{UID: 4321},
			want: []string{"uid 4321", "usermod -aG tupper 4321"}},
		{name: "no group yet", trust: noGroup, peer: Peer{UID: 1000}, user: "alice",
			want: []string{"groupadd tupper", "usermod -aG tupper alice", "restart tupper serve"}},
		{name: "unknown peer", trust: withGroup, peer: Peer{Err: errors.New("boom")},
			want: []string{"/run/tupper-x.sock", "could not tell who", "boom", "API key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := tt.trust.refusal(tt.peer, tt.user)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("refusal %q does not say %q", msg, w)
				}
			}
		})
	}
}

// TestSocketPeerOnControlPlane checks what the control plane makes of a
// request without a key from the local socket: a trusted peer is the
// default team's operator, anyone else is refused with 403 and what to do,
// and a key, when sent, decides as over TCP.
func TestSocketPeerOnControlPlane(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{"templateID":"base"}`)
	trust := &socketTrust{path: "/run/tupper-test.sock", group: "tupper"}
	serve := func(peer *socketPeer, key string) *httptest.ResponseRecorder {
		ctx := context.Background()
		if peer != nil {
			ctx = context.WithValue(ctx, socketPeerKey{}, peer)
		}
		r := httptest.NewRequestWithContext(ctx, "GET", "/sandboxes/"+sb.SandboxID, nil)
		if key != "" {
			r.Header.Set(headerAPIKey, key)
		}
		w := httptest.NewRecorder()
		e.server.ServeHTTP(w, r)
		return w
	}
	root := &socketPeer{Peer: Peer{UID: 0}, trusted: true, trust: trust}
	stranger := &socketPeer{Peer: Peer{UID: 4321, GID: 4321}, trust: trust}
	tests := []struct {
		name string
		peer *socketPeer
		key  string
		want int
		says string
	}{
		{name: "trusted peer, no key", peer: root, want: http.StatusOK},
		{name: "stranger, no key", peer: stranger, want: http.StatusForbidden, says: "/run/tupper-test.sock"},
		{name: "stranger with a key", peer: stranger, key: e.key, want: http.StatusOK},
		{name: "trusted peer with a wrong key", peer: root, key: "e2b_" + strings.Repeat("0", 40), want: http.StatusUnauthorized},
		{name: "TCP, no key", want: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := serve(tt.peer, tt.key)
			if w.Code != tt.want || !strings.Contains(w.Body.String(), tt.says) {
				t.Errorf("GET the sandbox: %d %s, want %d saying %q", w.Code, w.Body, tt.want, tt.says)
			}
		})
	}
}
