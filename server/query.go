package server

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// maxListLimit is the largest page a listing returns, as in the E2B API.
const maxListLimit = 100

// listQuery is a parsed GET /v2/sandboxes query.
type listQuery struct {
	Metadata     map[string]string
	States       []string
	Limit        int
	NextToken    string
	Template     string
	StartedAfter time.Time
}

// pageLimit reads a listing's limit (its page size) of at most most, def
// when it names none.
func pageLimit(q url.Values, def, most int) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > most {
		return 0, fmt.Errorf("limit %q must be a whole number from 1 to %d: %w", s, most, errdefs.ErrInvalidArgument)
	}
	return n, nil
}

// parseListQuery parses a listing's query. defaultLimit applies when the
// query names none; 0 means everything.
func parseListQuery(q url.Values, defaultLimit int) (*listQuery, error) {
	lq := &listQuery{Limit: defaultLimit, NextToken: q.Get("nextToken"), Template: q.Get("template")}
	var err error
	if lq.Metadata, err = parseMetadataQuery(q.Get("metadata")); err != nil {
		return nil, err
	}
	if lq.States, err = parseStates(q["state"]); err != nil {
		return nil, err
	}
	if lq.Limit, err = pageLimit(q, defaultLimit, maxListLimit); err != nil {
		return nil, err
	}
	if s := q.Get("startedAfter"); s != "" {
		if lq.StartedAfter, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return nil, fmt.Errorf("startedAfter %q is not an RFC 3339 time: %w", s, errdefs.ErrInvalidArgument)
		}
	}
	return lq, nil
}

// parseStates reads the state filter, given as a comma list
// (state=running,paused, as the JS SDK sends it) or repeated
// (state=running&state=paused, as the Python SDK does).
func parseStates(vals []string) ([]string, error) {
	var out []string
	for _, v := range vals {
		for st := range strings.SplitSeq(v, ",") {
			switch st = strings.TrimSpace(st); st {
			case "":
			case store.StateRunning, store.StatePaused:
				if !slices.Contains(out, st) {
					out = append(out, st)
				}
			default:
				return nil, fmt.Errorf("state %q is not one of running, paused: %w", st, errdefs.ErrInvalidArgument)
			}
		}
	}
	return out, nil
}

// parseMetadataQuery parses the metadata filter of a listing: the value of
// the `metadata` query parameter, itself a query string "k=v&k2=v2" (the
// HTTP layer has already undone the outer encoding).
//
// The SDKs encode it differently. Python url-encodes the pairs once. The JS
// SDK applies encodeURIComponent to each key and value and then
// url-encodes the pairs, so after parsing them its keys and values are
// still percent-encoded. Hence the rule: a key or value that still holds a
// valid percent-escape after parsing is unescaped once more. The one
// input this reads wrongly is a Python filter whose value itself
// contains a valid escape such as "%41"; JS filters round-trip exactly.
func parseMetadataQuery(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("metadata filter %q is not a query string like k1=v1&k2=v2: %w", raw, errdefs.ErrInvalidArgument)
	}
	out := make(map[string]string, len(vals))
	for k, vs := range vals {
		key := unescapeAgain(k)
		if key == "" {
			return nil, fmt.Errorf("metadata filter %q has an empty key: %w", raw, errdefs.ErrInvalidArgument)
		}
		for _, v := range vs {
			v = unescapeAgain(v)
			if old, ok := out[key]; ok && old != v {
				return nil, fmt.Errorf("metadata filter names key %q twice with different values: %w", key, errdefs.ErrInvalidArgument)
			}
			out[key] = v
		}
	}
	return out, nil
}

// unescapeAgain undoes the JS SDK's encodeURIComponent, which leaves no
// '+' meaning space, so '+' stays a plus.
func unescapeAgain(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}
