package backend

import (
	"context"
	"sync"
)

// Finding is one thing a backend's self-check looked at on this host.
type Finding struct {
	// What was checked, such as "runsc" or "cgroups".
	What string `json:"what"`
	// OK says whether it is as the backend needs it.
	OK bool `json:"ok"`
	// Detail says what was found (a version, a path, a count).
	Detail string `json:"detail,omitempty"`
	// Fix says what to do when it is not OK.
	Fix string `json:"fix,omitempty"`
	// Optional findings do not stop the backend from working; they say
	// what it does less well.
	Optional bool `json:"optional,omitempty"`
}

// Check looks at the host for a backend without opening it, so that it can
// say what is missing where the backend would fail to open.
type Check func(ctx context.Context) []Finding

var (
	checksMu sync.RWMutex
	checks   = map[string]Check{}
)

// RegisterCheck gives the backend registered as name a self-check, which
// `tupper doctor` runs. Backend packages call it from init beside
// Register. It panics when c is nil or name already has one.
func RegisterCheck(name string, c Check) {
	if c == nil {
		panic("backend: RegisterCheck of " + name + " with a nil check")
	}
	checksMu.Lock()
	defer checksMu.Unlock()
	if _, dup := checks[name]; dup {
		panic("backend: RegisterCheck called twice for " + name)
	}
	checks[name] = c
}

// Report is what the self-check of one registered backend found.
type Report struct {
	Backend string `json:"backend"`
	// Works says whether every finding that is not optional is OK. A
	// backend without a self-check does not claim to work.
	Works    bool      `json:"works"`
	Checked  bool      `json:"checked"`
	Findings []Finding `json:"findings,omitempty"`
}

// CheckAll runs the self-check of every registered backend, in the order
// of Names.
func CheckAll(ctx context.Context) []Report {
	var out []Report
	for _, name := range Names() {
		checksMu.RLock()
		c := checks[name]
		checksMu.RUnlock()
		r := Report{Backend: name}
		if c != nil {
			r.Checked = true
			r.Findings = c(ctx)
			r.Works = true
			for _, f := range r.Findings {
				if !f.OK && !f.Optional {
					r.Works = false
				}
			}
		}
		out = append(out, r)
	}
	return out
}
