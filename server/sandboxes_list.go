package server

import (
	"context"
	"net/http"

	"github.com/lightbearco/tupper/engine"
)

// handleList serves GET /v2/sandboxes: pages of at most 100 sandboxes,
// with X-Next-Token when there are more.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	s.list(w, r, maxListLimit)
}

// handleListV1 serves GET /sandboxes, which E2B answers without pages:
// every sandbox unless a limit is given.
func (s *Server) handleListV1(w http.ResponseWriter, r *http.Request) {
	s.list(w, r, 0)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, defaultLimit int) {
	lq, err := parseListQuery(r.URL.Query(), defaultLimit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sbs, next, err := s.listFiltered(r.Context(), lq)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]listedSandboxJSON, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, listedJSON(sb))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

// listFiltered lists through the engine, which filters by state and
// metadata, and applies the filters the engine does not know (template,
// startedAfter) itself. To keep pages full and tokens exact it asks the
// engine, page after page, for just as many sandboxes as are still
// missing, so every sandbox the engine returns is consumed and its token
// points right after the last one.
func (s *Server) listFiltered(ctx context.Context, lq *listQuery) ([]*engine.Sandbox, string, error) {
	opts := engine.ListOptions{States: lq.States, Metadata: lq.Metadata, Limit: lq.Limit, NextToken: lq.NextToken}
	keep := func(sb *engine.Sandbox) bool {
		return (lq.Template == "" || sb.TemplateID == lq.Template) &&
			(lq.StartedAfter.IsZero() || sb.StartedAt.After(lq.StartedAfter))
	}
	var out []*engine.Sandbox
	for {
		page, next, err := s.engine.List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		for _, sb := range page {
			if keep(sb) {
				out = append(out, sb)
			}
		}
		if next == "" || opts.Limit == 0 {
			return out, "", nil
		}
		if len(out) == lq.Limit {
			return out, next, nil
		}
		opts.Limit, opts.NextToken = lq.Limit-len(out), next
	}
}
