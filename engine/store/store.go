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
	"slices"
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

// DefaultTeam owns the sandboxes created with no team named, and every
// sandbox recorded before sandboxes had owners.
const DefaultTeam = "default"

// ReservedMetadataPrefix starts the metadata keys that are Tupper's own:
// no create may set them and no listing filter on them. Nothing of
// Tupper's is kept there any more (owners are fields of the record);
// Open removes what older versions kept.
const ReservedMetadataPrefix = "tupper."

// Sandbox is one sandbox's record.
type Sandbox struct {
	ID      string `json:"id"`
	Backend string `json:"backend"`
	// Team owns the sandbox: the team of the API key that created it.
	// Only calls scoped to that team see it (see engine.Scope).
	Team string `json:"team"`
	// Creator is the id of the API key that created the sandbox, empty
	// when no key did (an embedded engine).
	Creator     string            `json:"creator,omitempty"`
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
	// Secure is what E2B's create said of it: envd behind an access
	// token, which is how Tupper always runs.
	Secure *bool `json:"secure,omitempty"`
	// AutoPause pauses the sandbox at its timeout rather than killing it
	// (E2B's lifecycle onTimeout "pause"); AutoPauseMemory false makes
	// that pause keep its files only, not its memory and processes.
	// AutoResume resumes a paused sandbox when a request reaches it
	// through the data plane.
	AutoPause       bool  `json:"autoPause,omitempty"`
	AutoPauseMemory *bool `json:"autoPauseMemory,omitempty"`
	AutoResume      bool  `json:"autoResume,omitempty"`
	// Timeout is the time to live the sandbox was created with, which a
	// resume gives it again when the resume names none.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Pids is the sandbox's task limit; zero means the engine's default.
	Pids int64 `json:"pids,omitempty"`
	// StartCmd and ReadyCmd are its template's start command and ready
	// check, which its agent runs when it first boots (a restore finds
	// them done), as StartUser in StartDir (empty: the agent's default
	// user, in that user's home). See image.LabelStartCmd.
	StartCmd  string `json:"startCmd,omitempty"`
	ReadyCmd  string `json:"readyCmd,omitempty"`
	StartUser string `json:"startUser,omitempty"`
	StartDir  string `json:"startDir,omitempty"`
	// PausedAt is when the sandbox was last paused; MemoryKept says
	// whether that pause kept its memory and processes (else only its
	// files).
	PausedAt   time.Time `json:"pausedAt,omitzero"`
	MemoryKept bool      `json:"memoryKept,omitempty"`
	// SnapshotID is the snapshot the sandbox was started from, if any.
	SnapshotID string `json:"snapshotID,omitempty"`
	// Warm says the sandbox came from a warm pool, booted before its
	// create.
	Warm bool `json:"warm,omitempty"`
	// Rebooted says the sandbox runs on an image a reboot made of its
	// files (named tupper-paused/<id>), which goes with it.
	Rebooted bool `json:"rebooted,omitempty"`
	// CodeInterpreterPort is where the sandbox serves Tupper's code
	// interpreter (its image says so), or 0. The daemon hands that port
	// the envd token that E2B's code-interpreter SDKs send to it.
	CodeInterpreterPort int `json:"codeInterpreterPort,omitempty"`
	// VolumeMounts are the volumes mounted into the sandbox, as its create
	// asked; a volume that a live sandbox (or a snapshot of one) mounts
	// cannot be deleted.
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
	// KilledAt and KillReason are set once the sandbox is gone.
	KilledAt   time.Time `json:"killedAt,omitzero"`
	KillReason string    `json:"killReason,omitempty"`
}

// Store is the engine's database.
type Store struct {
	// db writes, on one connection; read reads, on several, which WAL
	// lets run beside a write: a listing never waits behind the synced
	// writes of a burst of creates.
	db   *sql.DB
	read *sql.DB
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

// migrations[i] takes the database from user_version i to i+1; each runs
// in one transaction.
var migrations = []func(ctx context.Context, tx *sql.Tx) error{
	migrateOwners,
	migrateSnapshots,
	migrateVolumes,
}

// migrateOwners gives sandboxes owners: a team (the default one for every
// sandbox so far) and a creator. Older versions kept the MCP server's
// owner, an API key's id, in the metadata key "tupper.mcp.owner", where
// clients could read and write it: it becomes the creator, and Tupper's
// keys leave the metadata.
func migrateOwners(ctx context.Context, tx *sql.Tx) error {
	for _, q := range []string{
		`ALTER TABLE sandboxes ADD COLUMN team TEXT NOT NULL DEFAULT '` + DefaultTeam + `'`,
		`ALTER TABLE sandboxes ADD COLUMN creator TEXT NOT NULL DEFAULT ''`,
		`CREATE INDEX IF NOT EXISTS sandboxes_by_team ON sandboxes(team, state, started_ns, id)`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	rows, err := tx.QueryContext(ctx, `SELECT data FROM sandboxes WHERE data LIKE '%"tupper.%'`)
	if err != nil {
		return err
	}
	var recs []*Sandbox
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			rows.Close()
			return err
		}
		sb, err := decode(data)
		if err != nil {
			rows.Close()
			return err
		}
		recs = append(recs, sb)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, sb := range recs {
		if owner := sb.Metadata["tupper.mcp.owner"]; strings.HasPrefix(owner, "key_") {
			sb.Creator = owner
		}
		maps.DeleteFunc(sb.Metadata, func(k, _ string) bool { return strings.HasPrefix(k, ReservedMetadataPrefix) })
		sb.Team = DefaultTeam
		data, err := json.Marshal(sb)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET data = ?, creator = ? WHERE id = ?`, string(data), sb.Creator, sb.ID); err != nil {
			return err
		}
	}
	return nil
}

// migrate brings the schema up to date under SQLite's write lock, so that
// two processes opening the database at once migrate it once.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// A write first takes the lock before the version is read.
	if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET id = id WHERE 0`); err != nil {
		return err
	}
	var version int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return err
	}
	if version > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this tupper knows (%d): upgrade tupper", version, len(migrations))
	}
	if version == len(migrations) {
		return nil
	}
	for i := version; i < len(migrations); i++ {
		if err := migrations[i](ctx, tx); err != nil {
			return fmt.Errorf("migrate to version %d: %w", i+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, len(migrations))); err != nil {
		return err
	}
	return tx.Commit()
}

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
	if err := migrate(context.Background(), db); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	read, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	read.SetMaxOpenConns(4)
	return &Store{db: db, read: read}, nil
}

// Close closes the database.
func (s *Store) Close() error { return errors.Join(s.read.Close(), s.db.Close()) }

// Put inserts or replaces a sandbox record.
func (s *Store) Put(ctx context.Context, sb *Sandbox) error {
	data, err := json.Marshal(sb)
	if err != nil {
		return fmt.Errorf("sandbox %q: encode record: %w", sb.ID, err)
	}
	team := sb.Team
	if team == "" {
		team = DefaultTeam
	}
	_, err = s.exec(ctx,
		`INSERT INTO sandboxes(id, state, started_ns, team, creator, data) VALUES(?, ?, ?, ?, ?, ?)
		 ON CONFLICT(id) DO UPDATE SET state=excluded.state, started_ns=excluded.started_ns,
		 team=excluded.team, creator=excluded.creator, data=excluded.data`,
		sb.ID, sb.State, sb.StartedAt.UnixNano(), team, sb.Creator, string(data))
	if err != nil {
		return fmt.Errorf("sandbox %q: save record: %w", sb.ID, err)
	}
	return nil
}

// exec runs a write. The caller's cancellation does not reach it: SQLite
// can report a write it finished as interrupted, when the interrupt comes
// after its commit, and its writer then believes a record absent that
// exists (a create's "creating" record that nothing cleans up). Writes
// are short, and busy_timeout bounds their wait for the lock.
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return s.db.ExecContext(context.WithoutCancel(ctx), query, args...)
}

// Get returns the record of id, or an error wrapping errdefs.ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (*Sandbox, error) {
	var data string
	err := s.read.QueryRowContext(ctx, `SELECT data FROM sandboxes WHERE id = ?`, id).Scan(&data)
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
	if _, err := s.exec(ctx, `DELETE FROM sandboxes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("sandbox %q: delete record: %w", id, err)
	}
	return nil
}

// DeleteKilledStartedBefore removes the records of killed sandboxes that
// started before t, and returns how many went. Killed records are kept a
// while so that a client can learn why its sandbox is gone; not for ever.
func (s *Store) DeleteKilledStartedBefore(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.exec(ctx, `DELETE FROM sandboxes WHERE state = ? AND started_ns < ?`, StateKilled, t.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("prune killed sandboxes: %w", err)
	}
	return res.RowsAffected()
}

// Query selects sandboxes for a listing.
type Query struct {
	// Team keeps the records of this team; empty means every team.
	Team string
	// Creator keeps the records of sandboxes this API key created;
	// empty means any creator.
	Creator string
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
	if q.Team != "" {
		query += ` AND team = ?`
		args = append(args, q.Team)
	}
	if q.Creator != "" {
		query += ` AND creator = ?`
		args = append(args, q.Creator)
	}
	rows, err := s.read.QueryContext(ctx, query+` ORDER BY started_ns, id`, args...)
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
	if sb.Team == "" {
		// Written before sandboxes had owners (migrateOwners leaves the
		// records that need no other change as they were).
		sb.Team = DefaultTeam
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
	c.AllowInternetAccess = clonePtr(sb.AllowInternetAccess)
	c.Secure = clonePtr(sb.Secure)
	c.AutoPauseMemory = clonePtr(sb.AutoPauseMemory)
	c.VolumeMounts = slices.Clone(sb.VolumeMounts)
	return &c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
