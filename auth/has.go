package auth

import (
	"context"
	"fmt"
)

// Has reports whether the key whose id is id is stored: what was made
// with a key's rights (a dashboard session) ends when the key is removed.
func (s *Store) Has(ctx context.Context, id string) (bool, error) {
	ok, err := s.exists(ctx, `id = ?`, id)
	if err != nil {
		return false, fmt.Errorf("auth: look up key %q: %w", id, err)
	}
	return ok, nil
}
