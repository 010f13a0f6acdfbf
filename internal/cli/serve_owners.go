package cli

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/pflag"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/mcp"
)

// admissionFlags bound the daemon's creates (see engine's admission.go).
type admissionFlags struct {
	creating, queued, sandboxes, perTeam int
	queueWait                            time.Duration
}

func (a *admissionFlags) register(f *pflag.FlagSet) {
	f.IntVar(&a.creating, "max-creating", 0, "creates that boot at once; more wait their turn (default two per CPU)")
	f.IntVar(&a.queued, "max-queued", 0, "creates that wait for a turn; more are refused at once with 429 and Retry-After (default 4 × --max-creating)")
	f.DurationVar(&a.queueWait, "queue-wait", 0, "longest a create waits for a turn before it is refused with 429 (default 20s)")
	f.IntVar(&a.perTeam, "max-sandboxes-per-team", 0, "live sandboxes of one team at most; creates beyond are refused with 429 (default --max-sandboxes)")
	f.IntVar(&a.sandboxes, "max-sandboxes", 0, "live sandboxes at most; creates beyond are refused with 429 (default one per 128 MiB of memory, within the host's process ids)")
}

// mcpKeyScope is the daemon's MCP scope: each tool call of an HTTP session
// sees and touches only the sandboxes its API key created, within the
// key's team, as the engine enforces. A REST client cannot forge this: the
// owner is the key that authenticated the session, kept by the engine in
// the sandbox's record, never in metadata.
func mcpKeyScope(ctx context.Context) (context.Context, error) {
	id, team, ok := mcp.CallerKey(ctx)
	if !ok {
		return nil, errors.New("this MCP session has no API key: connect with X-API-KEY or Authorization: Bearer")
	}
	return engine.WithScope(ctx, engine.Scope{Team: team, Key: id, OnlyKey: true}), nil
}
