// Package oom is the sandbox's out-of-memory killer: what a Linux kernel
// does when a memory cgroup runs out, done from inside a gVisor sandbox,
// whose kernel (the sentry) has none.
//
// gVisor reports the sandbox's memory limit as MemTotal in /proc/meminfo
// and what the sandbox's processes, its shared memory and its cached file
// pages use as MemTotal - MemAvailable, but it never acts on them: past
// the limit only the host's memory cgroup would stop it, by killing the
// whole sandbox. A Watcher polls that figure, faster the closer it gets
// to the limit, and when what is available falls to Slack it kills, with
// SIGKILL, the process with the highest score: its resident memory,
// shifted by its oom_score_adj as Linux does (-1000 spares it). It never
// kills the process it runs in (the agent, PID 1). After a kill it waits
// for the victim to be gone before it kills again, so one spike costs one
// process.
//
// A second kill in the same process group within escalateWindow takes
// the whole group: a fork bomb whose children each write hundreds of MiB
// refills what one kill frees faster than its processes can be killed one
// at a time, and they would end the whole sandbox.
//
// The design, the alternatives and the measurements behind the figures
// are in docs/design/limits.md.
package oom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// idleInterval is how often the watcher looks while nothing but the
// agent runs: nothing then can allocate (see intervals).
const idleInterval = time.Second

// Polling intervals by the share of MemTotal still available. Reading
// /proc/meminfo costs about 0.1 to 0.3 ms in gVisor; allocating costs
// about 5 ms per MiB there (0.2 GB/s measured), so at the finest interval
// a process grows by a few MiB between two looks. A sandbox where only the
// agent runs looks once a second (idleInterval), and once a process starts
// (Wake) or runs, ten times a second: each look wakes the sandbox's kernel
// and the agent's stub, which was most of an idle sandbox's CPU (2.7% of a
// core at ten looks a second against 0.6% at one, measured), the first
// bound on how many idle sandboxes a host runs.
var intervals = []struct {
	above    float64 // available share above which interval applies
	interval time.Duration
}{
	{0.75, idleInterval},
	{0.50, 100 * time.Millisecond},
	{0.25, 50 * time.Millisecond},
	{0.10, 20 * time.Millisecond},
	{0, 5 * time.Millisecond},
}

// noVictimBackoff is how long the watcher waits after it found nothing to
// kill over the limit: the memory is held by what killing cannot free
// (shared memory, the agent itself) or by spared processes.
const noVictimBackoff = time.Second

// victimTimeout bounds the wait for a killed process to vanish before the
// watcher looks for another victim.
const victimTimeout = 2 * time.Second

// Config configures a Watcher.
type Config struct {
	// Proc is the procfs to read; empty means /proc.
	Proc string
	// Slack is how much memory may remain available when the watcher
	// kills; zero means MemTotal/64, at least 1 MiB and at most 64 MiB.
	Slack int64
	// Mark, when set, is called with a victim's pid and the reason just
	// before it is killed; the kill is taken back with the function it
	// returns when it fails. The agent passes process.MarkOutOfMemory so
	// that the command's end event says what happened.
	Mark func(pid int, reason string) (undo func())
	// Logger receives a line per kill; nil means slog.Default().
	Logger *slog.Logger
}

// escalateWindow is how soon after a kill a second one in the same
// process group kills the whole group.
const escalateWindow = 2 * time.Second

// Watcher is an out-of-memory killer. Run it once.
type Watcher struct {
	cfg  Config
	log  *slog.Logger
	self int
	// selfPgrp is the agent's own process group, never killed whole.
	selfPgrp int
	wake     chan struct{}
	// groupKilled says the last kill took a whole group, whose memory
	// takes longer to show as freed; only Run's goroutine touches it.
	groupKilled bool
	// last is the process group and time of the last kill; only Run's
	// goroutine touches it.
	last struct {
		pgrp int
		at   time.Time
	}
}

// New returns a Watcher for cfg.
func New(cfg Config) *Watcher {
	if cfg.Proc == "" {
		cfg.Proc = "/proc"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Watcher{cfg: cfg, log: cfg.Logger, self: os.Getpid(), selfPgrp: getpgrp(), wake: make(chan struct{}, 1)}
}

// Wake makes the watcher look now, and closely while any process but its
// own runs: the agent calls it when it starts one. It never blocks. It is
// safe for concurrent use.
func (w *Watcher) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run watches until ctx ends and returns ctx's error, or an error at once
// when meminfo cannot be read.
func (w *Watcher) Run(ctx context.Context) error {
	mi, err := openMeminfo(filepath.Join(w.cfg.Proc, "meminfo"))
	if err != nil {
		return fmt.Errorf("oom: %w", err)
	}
	defer mi.Close()
	m, err := mi.read()
	if err != nil {
		return fmt.Errorf("oom: %w", err)
	}
	w.log.Info("out-of-memory killer watching", "limit_mib", m.Total>>20, "slack_mib", w.slack(m.Total)>>20)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-w.wake:
		}
		m, err := mi.read()
		if err != nil {
			// A transient failure must not end the watch: log and go on.
			w.log.Warn("oom: read meminfo", "err", err)
			t.Reset(time.Second)
			continue
		}
		next := interval(m)
		if next == idleInterval && w.othersRun() {
			next = intervals[1].interval
		}
		if m.Available <= w.slack(m.Total) {
			if rss, ok := w.killOne(ctx, m); ok {
				w.settle(ctx, mi, m, rss)
			} else {
				// Nothing to kill, or the kill failed: look again in a
				// while rather than spin.
				next = noVictimBackoff
			}
		}
		t.Reset(next)
	}
}

func (w *Watcher) slack(total int64) int64 {
	if w.cfg.Slack > 0 {
		return w.cfg.Slack
	}
	return min(max(total/64, 1<<20), 64<<20)
}

// interval is how long to wait before the next look at m's figures.
func interval(m meminfo) time.Duration {
	share := float64(m.Available) / float64(max(m.Total, 1))
	for _, iv := range intervals {
		if share > iv.above {
			return iv.interval
		}
	}
	return intervals[len(intervals)-1].interval
}

// killOne kills the process with the highest score (with its whole
// process group when the last kill, a moment ago, was in that group too),
// waits for it to be gone and reports whether it killed one, and the
// resident memory it had. It logs and returns false when there is none
// to kill.
func (w *Watcher) killOne(ctx context.Context, m meminfo) (int64, bool) {
	procs, err := scan(w.cfg.Proc, w.self)
	if err != nil {
		w.log.Warn("oom: list processes", "err", err)
		return 0, false
	}
	v, ok := pickVictim(procs, m.Total)
	if !ok {
		w.log.Warn("out of memory, and no process to kill", "used_mib", (m.Total-m.Available)>>20, "limit_mib", m.Total>>20)
		return 0, false
	}
	reason := fmt.Sprintf("the sandbox's memory limit is %d MiB", m.Total>>20)
	if w.wholeGroup(v) {
		return w.killGroup(ctx, m, v, procs, reason)
	}
	undo := func() {}
	if w.cfg.Mark != nil {
		undo = w.cfg.Mark(v.pid, reason)
	}
	if err := killProcess(w.cfg.Proc, v); err != nil {
		undo()
		if errors.Is(err, errGone) {
			return 0, true // it went by itself: look again at once
		}
		w.log.Warn("oom: kill", "pid", v.pid, "err", err)
		return 0, false
	}
	w.last.pgrp, w.last.at = v.pgrp, time.Now()
	w.log.Warn("out of memory: killed process", "pid", v.pid, "comm", v.comm, "rss_mib", v.rss>>20,
		"used_mib", (m.Total-m.Available)>>20, "limit_mib", m.Total>>20)
	w.waitGone(ctx, v)
	return v.rss, true
}

// wholeGroup reports whether v's whole process group is to die with it:
// the last kill, within escalateWindow, was in the same group, and the
// group is neither the agent's own nor the first process's.
func (w *Watcher) wholeGroup(v proc) bool {
	return v.pgrp > 1 && v.pgrp != w.selfPgrp && v.pgrp == w.last.pgrp && time.Since(w.last.at) < escalateWindow
}

// killGroup kills v's process group, every member marked (those forked
// after the scan die unmarked with it), and waits for v to be gone.
func (w *Watcher) killGroup(ctx context.Context, m meminfo, v proc, procs []proc, reason string) (int64, bool) {
	var undos []func()
	var rss int64
	var group []proc
	for _, p := range procs {
		if p.pgrp != v.pgrp {
			continue
		}
		if p.adj <= -1000 {
			// A spared process in the group spares the group: kill v alone
			// by forgetting the last kill.
			w.last.pgrp = 0
			return w.killOne(ctx, m)
		}
		group = append(group, p)
		rss += p.rss
		if w.cfg.Mark != nil {
			undos = append(undos, w.cfg.Mark(p.pid, reason))
		}
	}
	if err := killGroup(v.pgrp); err != nil {
		for _, u := range undos {
			u()
		}
		if errors.Is(err, errGone) {
			return 0, true
		}
		w.log.Warn("oom: kill process group", "pgrp", v.pgrp, "err", err)
		return 0, false
	}
	w.last.pgrp, w.last.at = v.pgrp, time.Now()
	w.log.Warn("out of memory again in one process group: killed the group", "pgrp", v.pgrp, "processes", len(group),
		"comm", v.comm, "rss_mib", rss>>20, "used_mib", (m.Total-m.Available)>>20, "limit_mib", m.Total>>20)
	// Every member, not only v, and those forked after the scan too:
	// until they are all gone their memory is not back, and a look would
	// take a bystander for the same spike.
	w.waitGroupGone(ctx, v.pgrp)
	w.groupKilled = true
	return rss, true
}

// othersRun reports whether any process but the watcher's own is in the
// process table: one directory listing.
func (w *Watcher) othersRun() bool {
	entries, err := os.ReadDir(w.cfg.Proc)
	if err != nil {
		return true
	}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 && pid != w.self {
			return true
		}
	}
	return false
}

// waitGroupGone waits until no process of group pgrp is left in the
// process table, or victimTimeout passes.
func (w *Watcher) waitGroupGone(ctx context.Context, pgrp int) {
	deadline := time.Now().Add(victimTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		procs, err := scan(w.cfg.Proc, w.self)
		if err != nil {
			return
		}
		if !slices.ContainsFunc(procs, func(p proc) bool { return p.pgrp == pgrp }) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settleTimeout bounds the wait after a kill for the sandbox's figures to
// show the victim's memory freed. Short: a process that keeps allocating
// meanwhile (about 0.2 GB/s in gVisor) must not outgrow the host's
// headroom above the limit. A group's memory takes longer to show:
// settleGroupTimeout.
const (
	settleTimeout      = 250 * time.Millisecond
	settleGroupTimeout = time.Second
)

// settle waits, after a kill, until the figures show the victim's memory
// freed (half of what it had resident back, or more than the slack
// available) or settleTimeout passes. gVisor's figures lag a process's
// exit: a look before they catch up would find the sandbox still out of
// memory and take a second process, the shell that ran the first or a
// sleeping neighbour, for the same spike.
func (w *Watcher) settle(ctx context.Context, mi *meminfoFile, before meminfo, rss int64) {
	timeout := settleTimeout
	if w.groupKilled {
		timeout, w.groupKilled = settleGroupTimeout, false
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		m, err := mi.read()
		if err == nil && (m.Available-before.Available >= rss/2 || m.Available > w.slack(m.Total)) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitGone waits until v has left the process table (its memory is
// freed by then) or victimTimeout passes.
func (w *Watcher) waitGone(ctx context.Context, v proc) {
	deadline := time.Now().Add(victimTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil && v.alive(w.cfg.Proc) {
		time.Sleep(2 * time.Millisecond)
	}
}
