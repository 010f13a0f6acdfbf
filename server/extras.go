package server

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// sandboxExtras is what a create said that the engine does not keep (yet):
// the E2B options that Tupper accepts but cannot honour now.
type sandboxExtras struct {
	Secure *bool `json:"secure,omitempty"`
	// AutoPause asked for pausing instead of killing at timeout; without
	// a pausing backend the sandbox is killed.
	AutoPause bool `json:"autoPause,omitempty"`
}

// extrasStore keeps sandboxExtras by sandbox id in the server's own SQLite
// database. It is safe for concurrent use.
type extrasStore struct {
	db *sql.DB
}

// openExtras opens the database at path; an empty path keeps it in memory,
// so that it is lost when the server stops.
func openExtras(path string) (*extrasStore, error) {
	dsn := ":memory:"
	if path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("server state %s: %w", path, err)
		}
		dsn = "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("server state %s: %w", path, err)
	}
	// One connection, kept for good: an in-memory database lives exactly
	// as long as its connection.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS sandbox_extras (id TEXT PRIMARY KEY, data TEXT NOT NULL)`); err != nil {
		db.Close()
		return nil, fmt.Errorf("server state %s: create schema: %w", path, err)
	}
	return &extrasStore{db: db}, nil
}

func (x *extrasStore) Close() error { return x.db.Close() }

// put stores id's extras.
func (x *extrasStore) put(ctx context.Context, id string, ex *sandboxExtras) error {
	data, err := json.Marshal(ex)
	if err != nil {
		return fmt.Errorf("sandbox %q: encode server record: %w", id, err)
	}
	_, err = x.db.ExecContext(ctx,
		`INSERT INTO sandbox_extras(id, data) VALUES(?, ?) ON CONFLICT(id) DO UPDATE SET data = excluded.data`, id, string(data))
	if err != nil {
		return fmt.Errorf("sandbox %q: save server record: %w", id, err)
	}
	return nil
}

// remove forgets id's extras.
func (x *extrasStore) remove(ctx context.Context, id string) error {
	if _, err := x.db.ExecContext(ctx, `DELETE FROM sandbox_extras WHERE id = ?`, id); err != nil {
		return fmt.Errorf("sandbox %q: delete server record: %w", id, err)
	}
	return nil
}

// prune forgets the extras of every sandbox not in live.
func (x *extrasStore) prune(ctx context.Context, live map[string]bool) error {
	rows, err := x.db.QueryContext(ctx, `SELECT id FROM sandbox_extras`)
	if err != nil {
		return fmt.Errorf("prune server records: %w", err)
	}
	var gone []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("prune server records: %w", err)
		}
		if !live[id] {
			gone = append(gone, id)
		}
	}
	rows.Close()
	for _, id := range gone {
		if err := x.remove(ctx, id); err != nil {
			return err
		}
	}
	return nil
}
