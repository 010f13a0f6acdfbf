package local

import (
	"context"
	"strings"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
)

var _ sdk.LogTransport = (*Runtime)(nil)

// SandboxLogs implements sdk.LogTransport through the engine, which reads
// the sandbox's console from its backend.
func (r *Runtime) SandboxLogs(ctx context.Context, id string, q sdk.LogQuery) ([]sdk.LogEntry, error) {
	entries, err := r.engine.Logs(ctx, id, engine.LogQuery{
		Cursor: q.Cursor, Backward: q.Backward, Limit: q.Limit,
		MinLevel: strings.ToLower(q.Level), Search: q.Search,
	})
	if err != nil {
		return nil, err
	}
	out := make([]sdk.LogEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, sdk.LogEntry{Timestamp: e.Time, Level: e.Level, Message: e.Message, Fields: e.Fields})
	}
	return out, nil
}
