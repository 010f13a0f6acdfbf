package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// Volume is the record of a volume: a directory on the host, capped in
// size, that sandboxes mount and that outlives them.
type Volume struct {
	ID string `json:"id"`
	// Team owns the volume; Name is unique within it.
	Team    string `json:"team"`
	Creator string `json:"creator,omitempty"`
	Name    string `json:"name"`
	// Token opens the volume's content routes (E2B's volume token): it is
	// the only credential they take.
	Token     string    `json:"token"`
	SizeBytes int64     `json:"sizeBytes"`
	CreatedAt time.Time `json:"createdAt"`
	// State is VolumeReady, or VolumeCreating or VolumeDeleting while a
	// create or a delete runs (or crashed halfway).
	State string `json:"state"`
}

// The states of a volume.
const (
	VolumeCreating = "creating"
	VolumeReady    = "ready"
	VolumeDeleting = "deleting"
)

// VolumeMount is a volume mounted into a sandbox.
type VolumeMount struct {
	// Name is the volume's name, as the create named it; VolumeID is
	// the volume that name meant then.
	Name     string `json:"name"`
	VolumeID string `json:"volumeID"`
	// Path is where the volume appears in the sandbox.
	Path string `json:"path"`
}

// migrateVolumes adds the volumes table.
func migrateVolumes(ctx context.Context, tx *sql.Tx) error {
	for _, q := range []string{
		`CREATE TABLE volumes (
			id         TEXT PRIMARY KEY,
			team       TEXT NOT NULL,
			name       TEXT NOT NULL,
			state      TEXT NOT NULL,
			created_ns INTEGER NOT NULL,
			data       TEXT NOT NULL,
			UNIQUE(team, name)
		)`,
		`CREATE INDEX volumes_by_team ON volumes(team, created_ns, id)`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// InsertVolume records a new volume. A volume of the same name in its
// team fails with errdefs.ErrAlreadyExists.
func (s *Store) InsertVolume(ctx context.Context, v *Volume) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("volume %q: encode record: %w", v.Name, err)
	}
	res, err := s.exec(ctx,
		`INSERT INTO volumes(id, team, name, state, created_ns, data) VALUES(?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		v.ID, v.Team, v.Name, v.State, v.CreatedAt.UnixNano(), string(data))
	if err != nil {
		return fmt.Errorf("volume %q: save record: %w", v.Name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("volume %q: save record: %w", v.Name, err)
	} else if n == 0 {
		return fmt.Errorf("volume %q exists: name another, or delete it first: %w", v.Name, errdefs.ErrAlreadyExists)
	}
	return nil
}

// SetVolumeState changes the state of volume id.
func (s *Store) SetVolumeState(ctx context.Context, id, state string) error {
	v, err := s.getVolume(ctx, s.db, `id = ?`, id)
	if err != nil {
		return err
	}
	v.State = state
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("volume %q: encode record: %w", id, err)
	}
	if _, err := s.exec(ctx, `UPDATE volumes SET state = ?, data = ? WHERE id = ?`, state, string(data), id); err != nil {
		return fmt.Errorf("volume %q: save record: %w", id, err)
	}
	return nil
}

// GetVolume returns volume id, or an error wrapping errdefs.ErrNotFound.
func (s *Store) GetVolume(ctx context.Context, id string) (*Volume, error) {
	return s.getVolume(ctx, s.read, `id = ?`, id)
}

// GetVolumeByName returns the volume of team named name, or an error
// wrapping errdefs.ErrNotFound.
func (s *Store) GetVolumeByName(ctx context.Context, team, name string) (*Volume, error) {
	return s.getVolume(ctx, s.read, `team = ? AND name = ?`, team, name)
}

func (s *Store) getVolume(ctx context.Context, db *sql.DB, where string, args ...any) (*Volume, error) {
	var data string
	err := db.QueryRowContext(ctx, `SELECT data FROM volumes WHERE `+where, args...).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("volume %q: %w", args[len(args)-1], errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("volume %q: load record: %w", args[len(args)-1], err)
	}
	return decodeVolume(data)
}

// ListVolumes returns the volumes of team (every team's when team is
// empty), oldest first.
func (s *Store) ListVolumes(ctx context.Context, team string) ([]*Volume, error) {
	query, args := `SELECT data FROM volumes`, []any{}
	if team != "" {
		query += ` WHERE team = ?`
		args = append(args, team)
	}
	rows, err := s.read.QueryContext(ctx, query+` ORDER BY created_ns, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	defer rows.Close()
	var out []*Volume
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("list volumes: %w", err)
		}
		v, err := decodeVolume(data)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return out, nil
}

// DeleteVolume removes the record of volume id; a missing one is no
// error.
func (s *Store) DeleteVolume(ctx context.Context, id string) error {
	if _, err := s.exec(ctx, `DELETE FROM volumes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("volume %q: delete record: %w", id, err)
	}
	return nil
}

// VolumeHolders returns the sandboxes not killed (being created, running
// or paused) and the snapshots whose records mount volume id.
func (s *Store) VolumeHolders(ctx context.Context, id string) (sandboxes, snapshots []string, err error) {
	// The records are JSON: find the candidates by their text, then
	// decode them to be sure.
	like := `%"volumeID":"` + escapeLike(id) + `"%`
	mounts := func(ms []VolumeMount) bool {
		return slices.ContainsFunc(ms, func(m VolumeMount) bool { return m.VolumeID == id })
	}
	err = s.scan(ctx, `SELECT data FROM sandboxes WHERE state != ? AND data LIKE ? ESCAPE '\'`, []any{StateKilled, like}, func(data string) error {
		sb, err := decode(data)
		if err == nil && mounts(sb.VolumeMounts) {
			sandboxes = append(sandboxes, sb.ID)
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("volume %q: find its users: %w", id, err)
	}
	err = s.scan(ctx, `SELECT data FROM snapshots WHERE data LIKE ? ESCAPE '\'`, []any{like}, func(data string) error {
		sn, err := decodeSnapshot(data)
		if err == nil && mounts(sn.Source.VolumeMounts) {
			snapshots = append(snapshots, sn.ID)
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("volume %q: find its users: %w", id, err)
	}
	return sandboxes, snapshots, nil
}

// scan calls fn with the data column of each row query yields.
func (s *Store) scan(ctx context.Context, query string, args []any, fn func(data string) error) error {
	rows, err := s.read.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return err
		}
		if err := fn(data); err != nil {
			return err
		}
	}
	return rows.Err()
}

// escapeLike escapes s for a LIKE pattern with ESCAPE '\'.
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

func decodeVolume(data string) (*Volume, error) {
	var v Volume
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		return nil, fmt.Errorf("decode volume record: %w", err)
	}
	return &v, nil
}
