package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
)

// Sign-in links let the operator on the daemon's host open the dashboard
// without typing a key: `tupper dashboard` asks for one (an authenticated
// control-plane call), and the page trades the link's token, once, for a
// short-lived key of the asker's own scope. Both live in memory only: a
// restart of the daemon ends every session, and the operator asks again.
const (
	// loginLinkTTL is how long a link may wait for its one use.
	loginLinkTTL = 5 * time.Minute
	// sessionTTL is how long the key a link gives stays good.
	sessionTTL = 12 * time.Hour
	// maxLoginLinks and maxSessions bound what one team can make the
	// daemon hold: past them, the team's oldest link or session gives
	// way to its new one. Bounding each team, not the daemon, keeps one
	// team's links and sessions from crowding out another's (the
	// operator's among them), and the operator's keys bound the teams.
	maxLoginLinks = 32
	maxSessions   = 100
	// loginTokenBytes is the randomness of a link's token: 256 bits.
	loginTokenBytes = 32
)

// grant is what a link or a session lets its holder do: act in the scope
// of whoever asked for the link, or with no scope (the operator's, as a
// trusted local caller may be) when scoped is false.
type grant struct {
	scope   engine.Scope
	scoped  bool
	expires time.Time
}

// logins holds the sign-in links not yet used and the sessions they
// opened, each by the SHA-256 of its secret, so that a look-up never
// compares a secret byte by byte. It is safe for concurrent use.
type logins struct {
	mu       sync.Mutex
	links    map[string]grant
	sessions map[string]grant
	// now is the clock; tests move it.
	now func() time.Time
}

func newLogins() *logins {
	return &logins{links: map[string]grant{}, sessions: map[string]grant{}, now: time.Now}
}

func secretHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// team is the team whose links and sessions g counts among: its
// scope's, or "" for the operator's unscoped grants.
func (g grant) team() string {
	if !g.scoped {
		return ""
	}
	return g.scope.Team
}

// makeRoomLocked drops what expired from m and, when team holds limit
// entries of m already, the one of them that expires first, so that m
// has room for one more of team's.
func (l *logins) makeRoomLocked(m map[string]grant, team string, limit int) {
	now := l.now()
	held, oldest := 0, ""
	for k, g := range m {
		switch {
		case !now.Before(g.expires):
			delete(m, k)
		case g.team() == team:
			held++
			if oldest == "" || g.expires.Before(m[oldest].expires) {
				oldest = k
			}
		}
	}
	if held >= limit {
		delete(m, oldest)
	}
}

// newLink makes a one-time link token for the scope of g.
func (l *logins) newLink(g grant) (string, time.Time, error) {
	b := make([]byte, loginTokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", time.Time{}, fmt.Errorf("sign-in link: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.makeRoomLocked(l.links, g.team(), maxLoginLinks)
	g.expires = l.now().Add(loginLinkTTL)
	l.links[secretHash(token)] = g
	return token, g.expires, nil
}

// redeem uses up link token and returns a new session key for its scope,
// shaped like an API key so that every client takes it as one. A token
// that is unknown, used or expired fails with errdefs.ErrUnauthenticated.
func (l *logins) redeem(token string) (string, time.Time, error) {
	h := secretHash(token)
	l.mu.Lock()
	defer l.mu.Unlock()
	g, ok := l.links[h]
	delete(l.links, h)
	if !ok || !l.now().Before(g.expires) {
		return "", time.Time{}, fmt.Errorf("sign-in link used already or expired: %w", errdefs.ErrUnauthenticated)
	}
	l.makeRoomLocked(l.sessions, g.team(), maxSessions)
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", time.Time{}, fmt.Errorf("dashboard session: %w", err)
	}
	key := auth.KeyPrefix + hex.EncodeToString(b)
	g.expires = l.now().Add(sessionTTL)
	l.sessions[secretHash(key)] = g
	return key, g.expires, nil
}

// session returns the grant of session key, and false when key opens no
// live session.
func (l *logins) session(key string) (grant, bool) {
	h := secretHash(key)
	l.mu.Lock()
	defer l.mu.Unlock()
	g, ok := l.sessions[h]
	if ok && !l.now().Before(g.expires) {
		delete(l.sessions, h)
		return grant{}, false
	}
	return g, ok
}

// end closes session key, and reports whether it was one.
func (l *logins) end(key string) bool {
	h := secretHash(key)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.sessions[h]
	delete(l.sessions, h)
	return ok
}
