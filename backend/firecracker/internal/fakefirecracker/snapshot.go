//go:build linux

package main

// The stand-in's snapshots. A runc sandbox's memory cannot be saved, so
// the stand-in's "snapshot" is no memory snapshot: PUT /snapshot/create
// (on a paused VM, as Firecracker requires) writes a state file that
// records the VM's configuration as the API gave it (machine, drives and
// vsock, paths as given, as Firecracker's state file keeps them) and where
// the guest is, and a memory file that only says so; and it hands the
// guest, its runc sandbox still frozen, over to the snapshot. The VMM may
// then exit: its watchdog leaves the guest frozen and waits, outside the
// VMM's cgroup, for a stand-in to load the snapshot. PUT /snapshot/load,
// in a fresh stand-in, checks the files as Firecracker would (state format,
// the drives and vsock socket at the paths they had, relative to its root)
// and takes the guest over: its own watchdog now, its vsock socket at the
// recorded path, the runc sandbox thawed when resume_vm says so.
//
// What follows from it, and differs from Firecracker:
//   - a snapshot holds one guest, so it can be loaded once; loading it
//     while the VMM that made it still runs is refused (Firecracker would
//     clone the VM);
//   - resuming the VM that made the snapshot gives the snapshot up, since
//     the frozen guest runs on;
//   - a snapshot never loaded is removed, guest and all, a time after its
//     VMM ended: TUPPER_FAKEFC_SNAPSHOT_TTL, 10 minutes unless set;
//   - the guest's files live in its runc sandbox, not on the writable
//     drive, so they come back with the frozen guest, not from the drive.
//
// Creating a snapshot closes the vsock connections, as Firecracker resets
// the guest's vsock transport.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
)

// standInVersion is the stand-in's vmm_version, and the only snapshot
// data format it loads.
const standInVersion = "1.16.1-stand-in"

// snapshotKind marks the stand-in's state files.
const snapshotKind = "tupper-fakefirecracker-snapshot"

// ttlEnv names the time a snapshot that nobody loads keeps its guest.
const ttlEnv = "TUPPER_FAKEFC_SNAPSHOT_TTL"

func snapshotTTL() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(ttlEnv)); err == nil && d > 0 {
		return d
	}
	return 10 * time.Minute
}

type (
	snapshotCreateParams struct {
		SnapshotType string `json:"snapshot_type"`
		SnapshotPath string `json:"snapshot_path"`
		MemFilePath  string `json:"mem_file_path"`
	}
	memoryBackend struct {
		BackendType string `json:"backend_type"`
		BackendPath string `json:"backend_path"`
	}
	snapshotLoadParams struct {
		SnapshotPath        string         `json:"snapshot_path"`
		MemBackend          *memoryBackend `json:"mem_backend"`
		MemFilePath         string         `json:"mem_file_path"`
		EnableDiffSnapshots bool           `json:"enable_diff_snapshots"`
		TrackDirtyPages     bool           `json:"track_dirty_pages"`
		ResumeVM            bool           `json:"resume_vm"`
	}
)

// standInState is the stand-in's state file.
type standInState struct {
	Kind    string `json:"kind"`
	Note    string `json:"note"`
	Version string `json:"version"`
	// Work is the guest's work directory; Token names this snapshot in
	// it.
	Work      string        `json:"work"`
	Token     string        `json:"token"`
	RuncID    string        `json:"runcID"`
	Addr      string        `json:"addr"`
	AgentPort uint32        `json:"agentPort"`
	FwdPort   uint32        `json:"fwdPort"`
	Machine   machineConfig `json:"machine"`
	Drives    []driveConfig `json:"drives"`
	Vsock     vsockConfig   `json:"vsock"`
}

// memNote is the whole of the stand-in's memory file.
func memNote(work, token string) string {
	return fmt.Sprintf("tupper fakefirecracker: not a memory snapshot. The guest is the runc sandbox frozen in %s (snapshot %s); loading the snapshot thaws it.\n", work, token)
}

// createSnapshot is PUT /snapshot/create on a paused VM; the caller holds
// v.mu.
func (v *vmm) createSnapshot(p snapshotCreateParams) error {
	if p.SnapshotType != "" && p.SnapshotType != "Full" {
		return fmt.Errorf("the stand-in makes Full snapshots only, not %q", p.SnapshotType)
	}
	if p.SnapshotPath == "" || p.MemFilePath == "" {
		return errors.New("snapshot_path and mem_file_path are required")
	}
	g := v.guest
	tok := make([]byte, 8)
	rand.Read(tok)
	st := standInState{
		Kind: snapshotKind, Version: standInVersion,
		Note: "The stand-in cannot save a runc sandbox's memory: this snapshot holds the guest's runc sandbox frozen in its work directory, and loading it thaws it.",
		Work: v.work, Token: hex.EncodeToString(tok), RuncID: g.runcID, Addr: g.addr,
		AgentPort: g.agentPort, FwdPort: g.fwdPort, Vsock: *v.vsock,
	}
	if v.machine != nil {
		st.Machine = *v.machine
	}
	for _, id := range v.order {
		st.Drives = append(st.Drives, v.drives[id])
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	// Firecracker truncates files that exist.
	if err := os.WriteFile(inChroot(p.SnapshotPath), b, 0o600); err != nil {
		return fmt.Errorf("snapshot file: %w", err)
	}
	if err := os.WriteFile(inChroot(p.MemFilePath), []byte(memNote(st.Work, st.Token)), 0o600); err != nil {
		return fmt.Errorf("memory file: %w", err)
	}
	unlock, err := lockWork(v.work)
	if err != nil {
		return err
	}
	defer unlock()
	if err := writeJSON(filepath.Join(v.work, "handoff"), handoff{Token: st.Token}); err != nil {
		return err
	}
	// Firecracker resets the guest's vsock transport: every connection
	// through the socket ends.
	g.mu.Lock()
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	v.log.Info("snapshot made (the runc sandbox stays frozen; no memory is saved)", "work", v.work)
	return nil
}

// loadSnapshot is PUT /snapshot/load on a fresh stand-in; the caller holds
// v.mu. It returns the guest taken over.
func (v *vmm) loadSnapshot(p snapshotLoadParams) (*guest, error) {
	memPath := p.MemFilePath
	switch {
	case p.MemBackend != nil && p.MemFilePath != "":
		return nil, errors.New("mem_backend and mem_file_path are mutually exclusive")
	case p.MemBackend != nil && p.MemBackend.BackendType != "File":
		return nil, fmt.Errorf("the stand-in loads memory from a File backend only, not %q", p.MemBackend.BackendType)
	case p.MemBackend != nil:
		memPath = p.MemBackend.BackendPath
	case memPath == "":
		return nil, errors.New("one of mem_backend and mem_file_path is required")
	}
	b, err := os.ReadFile(inChroot(p.SnapshotPath))
	if err != nil {
		return nil, fmt.Errorf("cannot open the snapshot file: %w", err)
	}
	var st standInState
	if err := json.Unmarshal(b, &st); err != nil || st.Kind != snapshotKind {
		return nil, fmt.Errorf("%s is no stand-in snapshot (the stand-in loads its own only)", p.SnapshotPath)
	}
	if st.Version != standInVersion {
		return nil, fmt.Errorf("the snapshot's data format %s is not this VMM's %s", st.Version, standInVersion)
	}
	mem, err := os.ReadFile(inChroot(memPath))
	if err != nil {
		return nil, fmt.Errorf("cannot open the memory file: %w", err)
	}
	if string(mem) != memNote(st.Work, st.Token) {
		return nil, fmt.Errorf("memory file %s is not the snapshot's", memPath)
	}
	// As Firecracker: the drives at the paths they had, relative to this
	// VMM's root, the vsock socket bound at its.
	for _, d := range st.Drives {
		if _, err := os.Stat(inChroot(d.PathOnHost)); err != nil {
			return nil, fmt.Errorf("drive %s: cannot open %s: %w", d.DriveID, d.PathOnHost, err)
		}
		want := map[bool]string{true: "tupper-base", false: "tupper-rw"}[d.IsReadOnly]
		if l := label(inChroot(d.PathOnHost)); l != want {
			return nil, fmt.Errorf("drive %s: %s holds file system %q, not %s", d.DriveID, d.PathOnHost, l, want)
		}
	}
	vln, err := net.Listen("unix", inChroot(st.Vsock.UDSPath))
	if err != nil {
		return nil, fmt.Errorf("vsock: %w", err)
	}
	g, err := v.takeOver(st, p.ResumeVM, vln)
	if err != nil {
		vln.Close()
		return nil, err
	}
	mc := st.Machine
	v.machine, v.vsock, v.work = &mc, &st.Vsock, st.Work
	for _, d := range st.Drives {
		v.drives[d.DriveID] = d
		v.order = append(v.order, d.DriveID)
	}
	return g, nil
}

// takeOver makes the snapshot's guest this stand-in's: its watchdog, then
// the work directory's ownership, then the runc sandbox, thawed if resume.
func (v *vmm) takeOver(st standInState, resume bool, vln net.Listener) (*guest, error) {
	// The watchdog first: it leaves the guest alone unless the takeover
	// below made this process its owner.
	if _, err := os.Stat(st.Work); err != nil {
		return nil, fmt.Errorf("this snapshot no longer holds its guest: %s is gone (a stand-in that loaded it ended, or nobody loaded it within %s)", st.Work, snapshotTTL())
	}
	if err := startWatchdog(st.Work); err != nil {
		return nil, err
	}
	unlock, err := lockWork(st.Work)
	if err != nil {
		return nil, fmt.Errorf("this snapshot no longer holds its guest: %w", err)
	}
	h, handed := readHandoff(st.Work)
	owner, _ := readOwner(st.Work)
	switch {
	case !handed || h.Token != st.Token:
		err = errors.New("this snapshot no longer holds its guest: it was loaded already, or the VM that made it ran on (the stand-in's snapshots hold a frozen guest, not memory)")
	case owner.Pid != 0 && running(owner.Pid):
		err = fmt.Errorf("the VMM that made this snapshot (pid %d) still runs: the stand-in cannot clone its guest", owner.Pid)
	}
	if err == nil {
		err = setOwner(st.Work, v.id)
	}
	if err == nil {
		err = os.Remove(filepath.Join(st.Work, "handoff"))
	}
	unlock()
	if err != nil {
		return nil, err
	}
	rb, err := backend.Open("runc", backend.Config{Root: filepath.Join(st.Work, "runc"), Network: backend.NetworkConfig{NoEgress: true}, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	if resume {
		p, ok := rb.(backend.Pauser)
		if !ok {
			return nil, errors.New("the runc backend cannot resume")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := p.Resume(ctx, st.RuncID)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("thaw the guest: %w", err)
		}
	}
	g := &guest{runc: rb, runcID: st.RuncID, addr: st.Addr, agentPort: st.AgentPort, fwdPort: st.FwdPort, vsockLn: vln, conns: map[net.Conn]bool{}}
	go g.serveVsock(v.log)
	if w, ok := rb.(backend.Waiter); ok {
		go func() { v.exit <- w.Wait(context.Background(), g.runcID) }()
	}
	v.log.Info("snapshot loaded (the runc sandbox it froze is thawed)", "work", st.Work, "resumed", resume)
	return g, nil
}

// handoff is the work directory's mark that its guest belongs to a
// snapshot.
type handoff struct {
	Token string `json:"token"`
}

func readHandoff(work string) (handoff, bool) {
	var h handoff
	b, err := os.ReadFile(filepath.Join(work, "handoff"))
	if err != nil || json.Unmarshal(b, &h) != nil {
		return h, false
	}
	return h, true
}

// giveUpHandoff unmarks work's guest as a snapshot's.
func giveUpHandoff(work string) error {
	unlock, err := lockWork(work)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(filepath.Join(work, "handoff")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// owner is the VMM whose guest a work directory holds.
type owner struct {
	Pid int    `json:"pid"`
	ID  string `json:"id"`
}

// setOwner makes this process the owner of work; vmm names the VMM's id,
// for the tests' look for leftovers.
func setOwner(work, id string) error {
	if err := writeJSON(filepath.Join(work, "owner"), owner{Pid: os.Getpid(), ID: id}); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(work, "vmm"), []byte(id), 0o600)
}

func readOwner(work string) (owner, error) {
	var o owner
	b, err := os.ReadFile(filepath.Join(work, "owner"))
	if err != nil {
		return o, err
	}
	return o, json.Unmarshal(b, &o)
}

// lockWork takes work's lock, which orders the takeover of a guest, the
// giving up of a snapshot and the watchdogs' cleanup. It fails when work
// is gone.
func lockWork(work string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(work, "lock"), os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(work); serr != nil {
			return nil, serr
		}
		f, err = os.OpenFile(filepath.Join(work, "lock"), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if _, err := os.Stat(work); err != nil {
		// Removed while this waited.
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// running reports whether process pid exists and has not exited.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// leaveCgroups moves this process to the root cgroup of every hierarchy,
// out of the VMM's, whose Stop waits for it to empty.
func leaveCgroups() {
	mounts, _ := oci.CgroupMounts()
	for _, m := range mounts {
		os.WriteFile(filepath.Join(m, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	}
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
