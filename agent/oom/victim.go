package oom

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// pageSize is the unit of the rss field of /proc/<pid>/stat.
var pageSize = int64(os.Getpagesize())

// proc is what the watcher knows of a process.
type proc struct {
	pid       int
	comm      string
	state     byte
	pgrp      int    // process group
	startTime uint64 // clock ticks since boot: tells a process from a later one with its pid
	rss       int64  // bytes
	adj       int    // oom_score_adj, -1000..1000
}

// scan lists the processes under procRoot but self and zombies.
// Processes that vanish midway are left out.
func scan(procRoot string, self int) ([]proc, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || pid == self {
			continue
		}
		p, err := readProc(procRoot, pid)
		if err != nil || p.state == 'Z' || p.state == 'X' {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// readProc reads /proc/<pid>/stat and oom_score_adj.
func readProc(procRoot string, pid int) (proc, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return proc{}, err
	}
	p, err := parseStat(b)
	if err != nil {
		return proc{}, fmt.Errorf("%s/stat: %w", dir, err)
	}
	p.pid = pid
	if b, err := os.ReadFile(filepath.Join(dir, "oom_score_adj")); err == nil {
		if v, err := strconv.Atoi(string(bytes.TrimSpace(b))); err == nil {
			p.adj = v
		}
	}
	return p, nil
}

// parseStat reads the name, state, start time and resident set of a
// /proc/<pid>/stat line. The name sits in parentheses and may hold any
// byte, parentheses and spaces among them, so the fields are counted
// from the last ')'.
func parseStat(b []byte) (proc, error) {
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return proc{}, errors.New("no (comm)")
	}
	var p proc
	p.comm = string(b[open+1 : close])
	// Fields from 3 (state) on; pgrp is field 5, starttime field 22,
	// rss field 24.
	f := bytes.Fields(b[close+1:])
	if len(f) < 22 {
		return proc{}, fmt.Errorf("%d fields after comm, want 22 or more", len(f))
	}
	p.state = f[0][0]
	pg, err := strconv.Atoi(string(f[5-3]))
	if err != nil {
		return proc{}, fmt.Errorf("pgrp: %w", err)
	}
	p.pgrp = pg
	st, err := strconv.ParseUint(string(f[22-3]), 10, 64)
	if err != nil {
		return proc{}, fmt.Errorf("starttime: %w", err)
	}
	rss, err := strconv.ParseInt(string(f[24-3]), 10, 64)
	if err != nil {
		return proc{}, fmt.Errorf("rss: %w", err)
	}
	p.startTime, p.rss = st, rss*pageSize
	return p, nil
}

// score is Linux's oom_badness: the resident set, shifted by
// oom_score_adj thousandths of the memory the sandbox has.
func (p proc) score(total int64) int64 {
	return p.rss + int64(p.adj)*(total/1000)
}

// pickVictim returns the process with the highest score, sparing those
// whose oom_score_adj is -1000, and reports whether there is one.
func pickVictim(procs []proc, total int64) (proc, bool) {
	var best proc
	found := false
	for _, p := range procs {
		if p.adj <= -1000 {
			continue
		}
		if !found || p.score(total) > best.score(total) {
			best, found = p, true
		}
	}
	return best, found
}

// alive reports whether p still runs: its pid names the same process and
// it has not exited. An exited process has freed its memory, though its
// parent may not have reaped it yet.
func (p proc) alive(procRoot string) bool {
	q, err := readProc(procRoot, p.pid)
	return err == nil && q.startTime == p.startTime && q.state != 'Z' && q.state != 'X'
}
