// Package store keeps the engine's records in an embedded SQLite database so
// that a restarted daemon loses nothing: every sandbox, with the backend
// facts needed to re-attach to it.
//
// A Store is safe for concurrent use by one process. Two processes must not
// open the same database: the engine holds a lock file beside it.
package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// Sandbox states as recorded. Killed sandboxes stay in the store, with the
// reason, so that a sandbox never silently disappears.
const (
	StateCreating = "creating"
	StateRunning  = "running"
	StatePaused   = "paused"
	StateKilled   = "killed"
)

// Sandbox is one sandbox's record.
type Sandbox struct {
	ID          string            `json:"id"`
	Backend     string            `json:"backend"`
	TemplateID  string            `json:"templateID"`
	ImageRef    string            `json:"imageRef"`
	ImageID     string            `json:"imageID"`
	State       string            `json:"state"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	CPUs        float64           `json:"cpus"`
	MemoryMB    int               `json:"memoryMB"`
	DiskMB      int               `json:"diskMB,omitempty"`
	AgentAddr   string            `json:"agentAddr"`
	AccessToken string            `json:"accessToken"`
	Pid         int               `json:"pid"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	// Network is the egress policy as the create or the last update said
	// it, and AllowInternetAccess E2B's older switch beside it; what is
	// enforced is netpolicy.WithInternet of both.
	Network             *netpolicy.Policy `json:"network,omitempty"`
	AllowInternetAccess *bool             `json:"allowInternetAccess,omitempty"`
	// KilledAt and KillReason are set once the sandbox is gone.
	KilledAt   time.Time `json:"killedAt,omitzero"`
	KillReason string    `json:"killReason,omitempty"`
}

// Store is the engine's database.
type Store struct {
	db *sql.DB
}

const schema = `
CREATE TABLE IF NOT EXISTS sandboxes (
	id         TEXT PRIMARY KEY,
	state      TEXT NOT NULL,
	started_ns INTEGER NOT NULL,
	data       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sandboxes_by_start ON sandboxes(started_ns, id);
CREATE INDEX IF NOT EXISTS sandboxes_by_state ON sandboxes(state, started_ns, id);
`

// Open opens (creating when missing) the database at path.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	// WAL keeps readers off the writer's back; synchronous=FULL makes a
	// committed record survive a power cut, which recovery depends on.
	dsn := "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	// One connection serialises writers, which SQLite does anyway, and
	// avoids SQLITE_BUSY between our own connections.
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: create schema: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Put inserts or replaces a sandbox record.
func (s *Store) Put(ctx context.Context, sb *Sandbox) error {
	data, err := json.Marshal(sb)
	if err != nil {
		return fmt.Errorf("sandbox %q: encode record: %w", sb.ID, err)
	}
	_, err = s.db.ExecContext(ctx,
		`INSERT INTO sandboxes(id, state, started_ns, data) VALUES(?, ?, ?, ?)
		 ON CONFLICT(id) DO UPDATE SET state=excluded.state, started_ns=excluded.started_ns, data=excluded.data`,
		sb.ID, sb.State, sb.StartedAt.UnixNano(), string(data))
	if err != nil {
		return fmt.Errorf("sandbox %q: save record: %w", sb.ID, err)
	}
	return nil
}

// Get returns the record of id, or an error wrapping errdefs.ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (*Sandbox, error) {
	var data string
	err := s.db.QueryRowContext(ctx, `SELECT data FROM sandboxes WHERE id = ?`, id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: load record: %w", id, err)
	}
	return decode(data)
}

// Delete removes the record of id; deleting a missing record is no error.
func (s *Store) Delete(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("sandbox %q: delete record: %w", id, err)
	}
	return nil
}

// DeleteKilledStartedBefore removes the records of killed sandboxes that
// started before t, and returns how many went. Killed records are kept a
// while so that a client can learn why its sandbox is gone; not for ever.
func (s *Store) DeleteKilledStartedBefore(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM sandboxes WHERE state = ? AND started_ns < ?`, StateKilled, t.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("prune killed sandboxes: %w", err)
	}
	return res.RowsAffected()
}

// Query selects sandboxes for a listing.
type Query struct {
	// States keeps records in these states; empty means every state.
	States []string
	// Metadata keeps records whose metadata hold all these pairs.
	Metadata map[string]string
	// Limit is the page size; 0 means no limit.
	Limit int
	// After is a token from an earlier page.
	After string
}

// List returns the records matching q, oldest first, and a token for the
// next page when there may be more.
func (s *Store) List(ctx context.Context, q Query) ([]*Sandbox, string, error) {
	afterNs, afterID, err := decodeToken(q.After)
	if err != nil {
		return nil, "", err
	}
	// States are filtered in SQL: killed records pile up, and a listing
	// of live sandboxes must not decode them all.
	query := `SELECT data FROM sandboxes WHERE (started_ns, id) > (?, ?)`
	args := []any{afterNs, afterID}
	if len(q.States) > 0 {
		query += ` AND state IN (?` + strings.Repeat(`, ?`, len(q.States)-1) + `)`
		for _, st := range q.States {
			args = append(args, st)
		}
	}
	rows, err := s.db.QueryContext(ctx, query+` ORDER BY started_ns, id`, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []*Sandbox
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, "", fmt.Errorf("list sandboxes: %w", err)
		}
		sb, err := decode(data)
		if err != nil {
			return nil, "", err
		}
		if !q.matches(sb) {
			continue
		}
		if q.Limit > 0 && len(out) == q.Limit {
			last := out[len(out)-1]
			return out, encodeToken(last.StartedAt.UnixNano(), last.ID), nil
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list sandboxes: %w", err)
	}
	return out, "", nil
}

func (q *Query) matches(sb *Sandbox) bool {
	if len(q.States) > 0 {
		ok := false
		for _, st := range q.States {
			ok = ok || st == sb.State
		}
		if !ok {
			return false
		}
	}
	for k, v := range q.Metadata {
		if got, ok := sb.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func decode(data string) (*Sandbox, error) {
	var sb Sandbox
	if err := json.Unmarshal([]byte(data), &sb); err != nil {
		return nil, fmt.Errorf("decode sandbox record: %w", err)
	}
	return &sb, nil
}

// Page tokens are opaque to clients: base64 of "<started_ns>/<id>".
func encodeToken(ns int64, id string) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d/%s", ns, id))
}

func decodeToken(tok string) (int64, string, error) {
	if tok == "" {
		return -1 << 63, "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil {
		var ns int64
		var id string
		if n, _ := fmt.Sscanf(string(raw), "%d/%s", &ns, &id); n == 2 {
			return ns, id, nil
		}
	}
	return 0, "", fmt.Errorf("page token %q: %w: pass the token of an earlier listing unchanged", tok, errdefs.ErrInvalidArgument)
}

// Clone returns a deep copy of sb: the engine hands out copies of the
// records it keeps in memory, which callers may change.
func (sb *Sandbox) Clone() *Sandbox {
	if sb == nil {
		return nil
	}
	c := *sb
	c.Metadata = maps.Clone(sb.Metadata)
	c.Env = maps.Clone(sb.Env)
	c.Network = sb.Network.Clone()
	if sb.AllowInternetAccess != nil {
		v := *sb.AllowInternetAccess
		c.AllowInternetAccess = &v
	}
	return &c
}
