package gvisor

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A daemon killed while it runs a runsc command on a sandbox (`runsc
// create` during a Start, `runsc delete` during a Stop) does not take the
// command with it: runsc runs in a process group of its own and goes on,
// orphaned. The next daemon cleans up the half-made sandbox at its start,
// and must not do it under the orphan's feet: runsc create, finishing after
// the cleanup, leaves its lock and control socket in the state directory,
// and may leave processes that nothing tracks. Stop therefore waits for
// such commands first.

// orphanPoll is how often Stop looks again for an earlier process's runsc
// command on the sandbox it stops.
const orphanPoll = 20 * time.Millisecond

// waitForeignRunsc waits until no runsc command on sandbox id runs that
// this process did not start, and kills any that still runs after
// runscTimeout, the bound this process puts on its own. The caller holds
// id's lock, so no command of this process on id runs meanwhile.
func (b *Backend) waitForeignRunsc(ctx context.Context, id string) {
	deadline := time.Now().Add(runscTimeout)
	logged := false
	for {
		pids := runscCommands(b.runsc.Command, b.runsc.Root, id)
		if len(pids) == 0 {
			return
		}
		if !logged {
			b.log.Info("waiting for an earlier process's runsc command on the sandbox to end", "sandbox", id, "pids", pids)
			logged = true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, pid := range pids {
				unix.Kill(pid, unix.SIGKILL)
			}
			b.log.Warn("killed an earlier process's runsc command on the sandbox that did not end", "sandbox", id, "pids", pids)
			return
		}
		time.Sleep(orphanPoll)
	}
}

// runscCommands returns the processes, not children of this one, that run
// a runsc command (a binary named as command is) with state directory root
// on container id. The sandbox and gofer processes of a container do not
// count: runsc renames them (runsc-sandbox, runsc-gofer).
func runscCommands(command, root, id string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(id)) {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != filepath.Base(command) || args[len(args)-1] != id || !hasRoot(args, root) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || parentOf(pid) == os.Getpid() {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// hasRoot reports whether runsc's arguments args name root as its state
// directory.
func hasRoot(args []string, root string) bool {
	if i := slices.Index(args, "--root"); i >= 0 && i+1 < len(args) && args[i+1] == root {
		return true
	}
	return slices.Contains(args, "--root="+root)
}

// parentOf returns the parent of process pid, or 0.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: the fields
	// after the last ')' are state, then the parent.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
