package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// Sandboxes have owners: a team, and the API key that created them. The
// faces of the daemon that act for a client (the control plane, the MCP
// server) put the client's Scope on the context of their engine calls,
// and the engine enforces it in one place for every face: a sandbox
// outside the scope answers exactly as an unknown id does, so that its
// existence is not revealed either.

// DefaultTeam owns the sandboxes created outside any scope, and those
// recorded before sandboxes had owners.
const DefaultTeam = store.DefaultTeam

// ReservedMetadataPrefix starts the metadata keys that are Tupper's own:
// creates may not set them, and listings may not filter on them.
const ReservedMetadataPrefix = store.ReservedMetadataPrefix

// Scope confines the engine calls made on a context (see WithScope).
type Scope struct {
	// Team is the team whose sandboxes the calls see; sandboxes created
	// under the scope belong to it. Empty means DefaultTeam.
	Team string
	// Key is the id of the API key the calls act for: sandboxes created
	// under the scope record it as their creator.
	Key string
	// OnlyKey narrows the calls to the sandboxes that Key created (the
	// MCP server's sessions, each of which sees only its own key's work).
	OnlyKey bool
}

type scopeKey struct{}

// WithScope returns a copy of ctx on which every engine call sees and
// touches only the sandboxes s covers. A context without a scope is the
// operator's (an embedded engine, the daemon's own work), and sees every
// sandbox.
func WithScope(ctx context.Context, s Scope) context.Context {
	if s.Team == "" {
		s.Team = DefaultTeam
	}
	return context.WithValue(ctx, scopeKey{}, s)
}

// ScopeFrom returns the scope of ctx, and false when it has none.
func ScopeFrom(ctx context.Context) (Scope, bool) {
	s, ok := ctx.Value(scopeKey{}).(Scope)
	return s, ok
}

// covers reports whether sb is within s.
func (s Scope) covers(sb *Sandbox) bool {
	return sb.Team == s.Team && (!s.OnlyKey || sb.Creator == s.Key)
}

// visible reports whether a call on ctx may see sb.
func visible(ctx context.Context, sb *Sandbox) bool {
	s, ok := ScopeFrom(ctx)
	return !ok || s.covers(sb)
}

// errUnknown is the answer for a sandbox that does not exist, or that the
// caller's scope does not cover: the two must read the same.
func errUnknown(id string) error {
	return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
}

// checkScope fails with errdefs.ErrNotFound unless a call on ctx may see
// sandbox id. Calls without a scope pass at once.
func (e *Engine) checkScope(ctx context.Context, id string) error {
	if _, ok := ScopeFrom(ctx); !ok {
		return nil
	}
	_, err := e.Get(ctx, id)
	return err
}

// owners sets who owns sb, a sandbox being created on ctx.
func owners(ctx context.Context, sb *Sandbox) {
	sb.Team = DefaultTeam
	if s, ok := ScopeFrom(ctx); ok {
		sb.Team, sb.Creator = s.Team, s.Key
	}
}

// checkReservedMetadata refuses metadata keys that are Tupper's own in a
// create's metadata or a listing's filter; what names the call.
func checkReservedMetadata(what string, md map[string]string) error {
	for k := range md {
		if strings.HasPrefix(k, ReservedMetadataPrefix) {
			return fmt.Errorf("%s: metadata key %q: keys starting with %q are reserved for Tupper: choose another key: %w", what, k, ReservedMetadataPrefix, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
