package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// Snapshot is the record of a snapshot: a sandbox's whole state saved at a
// moment, which new sandboxes start from.
type Snapshot struct {
	ID      string `json:"id"`
	Team    string `json:"team"`
	Creator string `json:"creator,omitempty"`
	// Names are what a create may name the snapshot by besides its id,
	// unique within its team.
	Names     []string  `json:"names,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// Source is the record of the sandbox the snapshot was made of, as
	// it was then: the sandboxes started from it take its image, limits,
	// environment and network policy, and its agent's access token is
	// what the saved agent answers to.
	Source Sandbox `json:"source"`
	// SizeBytes is what the snapshot takes on disk.
	SizeBytes int64 `json:"sizeBytes"`
}

// migrateSnapshots adds the snapshots table.
func migrateSnapshots(ctx context.Context, tx *sql.Tx) error {
	for _, q := range []string{
		`CREATE TABLE snapshots (
			id         TEXT PRIMARY KEY,
			team       TEXT NOT NULL,
			sandbox    TEXT NOT NULL,
			created_ns INTEGER NOT NULL,
			data       TEXT NOT NULL
		)`,
		`CREATE INDEX snapshots_by_team ON snapshots(team, created_ns, id)`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// PutSnapshot inserts or replaces a snapshot record.
func (s *Store) PutSnapshot(ctx context.Context, sn *Snapshot) error {
	data, err := json.Marshal(sn)
	if err != nil {
		return fmt.Errorf("snapshot %q: encode record: %w", sn.ID, err)
	}
	_, err = s.exec(ctx,
		`INSERT INTO snapshots(id, team, sandbox, created_ns, data) VALUES(?, ?, ?, ?, ?)
		 ON CONFLICT(id) DO UPDATE SET team=excluded.team, sandbox=excluded.sandbox, created_ns=excluded.created_ns, data=excluded.data`,
		sn.ID, sn.Team, sn.Source.ID, sn.CreatedAt.UnixNano(), string(data))
	if err != nil {
		return fmt.Errorf("snapshot %q: save record: %w", sn.ID, err)
	}
	return nil
}

// GetSnapshot returns the snapshot of team whose id or one of whose
// names is ref, or an error wrapping errdefs.ErrNotFound.
func (s *Store) GetSnapshot(ctx context.Context, team, ref string) (*Snapshot, error) {
	var data string
	err := s.read.QueryRowContext(ctx, `SELECT data FROM snapshots WHERE id = ? AND team = ?`, ref, team).Scan(&data)
	if err == nil {
		return decodeSnapshot(data)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("snapshot %q: load record: %w", ref, err)
	}
	list, _, err := s.ListSnapshots(ctx, SnapshotQuery{Team: team, Name: ref})
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("snapshot %q: %w", ref, errdefs.ErrNotFound)
	}
	return list[0], nil
}

// GetSnapshotByID returns snapshot id of any team, or an error wrapping
// errdefs.ErrNotFound.
func (s *Store) GetSnapshotByID(ctx context.Context, id string) (*Snapshot, error) {
	var data string
	err := s.read.QueryRowContext(ctx, `SELECT data FROM snapshots WHERE id = ?`, id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("snapshot %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %q: load record: %w", id, err)
	}
	return decodeSnapshot(data)
}

// DeleteSnapshot removes the record of snapshot id; a missing one is no
// error.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	if _, err := s.exec(ctx, `DELETE FROM snapshots WHERE id = ?`, id); err != nil {
		return fmt.Errorf("snapshot %q: delete record: %w", id, err)
	}
	return nil
}

// SnapshotQuery selects snapshots for a listing.
type SnapshotQuery struct {
	// Team keeps the snapshots of this team; empty means every team.
	Team string
	// SandboxID keeps the snapshots of this sandbox; Name those with this
	// name; Creator those this API key made.
	SandboxID string
	Name      string
	Creator   string
	// Limit is the page size; 0 means no limit. After is a token from an
	// earlier page.
	Limit int
	After string
}

// ListSnapshots returns the snapshots matching q, oldest first, and a
// token for the next page when there may be more.
func (s *Store) ListSnapshots(ctx context.Context, q SnapshotQuery) ([]*Snapshot, string, error) {
	afterNs, afterID, err := decodeToken(q.After)
	if err != nil {
		return nil, "", err
	}
	query := `SELECT data FROM snapshots WHERE (created_ns, id) > (?, ?)`
	args := []any{afterNs, afterID}
	if q.Team != "" {
		query += ` AND team = ?`
		args = append(args, q.Team)
	}
	if q.SandboxID != "" {
		query += ` AND sandbox = ?`
		args = append(args, q.SandboxID)
	}
	rows, err := s.read.QueryContext(ctx, query+` ORDER BY created_ns, id`, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list snapshots: %w", err)
	}
	defer rows.Close()
	var out []*Snapshot
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, "", fmt.Errorf("list snapshots: %w", err)
		}
		sn, err := decodeSnapshot(data)
		if err != nil {
			return nil, "", err
		}
		if q.Name != "" && !slices.Contains(sn.Names, q.Name) || q.Creator != "" && sn.Creator != q.Creator {
			continue
		}
		if q.Limit > 0 && len(out) == q.Limit {
			last := out[len(out)-1]
			return out, encodeToken(last.CreatedAt.UnixNano(), last.ID), nil
		}
		out = append(out, sn)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list snapshots: %w", err)
	}
	return out, "", nil
}

func decodeSnapshot(data string) (*Snapshot, error) {
	var sn Snapshot
	if err := json.Unmarshal([]byte(data), &sn); err != nil {
		return nil, fmt.Errorf("decode snapshot record: %w", err)
	}
	return &sn, nil
}
