package gvisor

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// orphanPoll is how often Stop looks again at an earlier process's runsc
// command on the sandbox it stops.
const orphanPoll = 20 * time.Millisecond

// foreignRunsc holds the runsc commands on this backend's state that other
// processes left running. They are found once, by a scan of /proc at the
// first Stop (a scan reads every process's command line: milliseconds on a
// quiet host, up to a second on one running thousands of processes), and
// only in the first runscTimeout after New: no other process manages this
// Root meanwhile, so none can appear later, and by then an earlier
// process's commands would have hit its own bound. Safe for concurrent use.
type foreignRunsc struct {
	since time.Time
	once  sync.Once
	mu    sync.Mutex
	byID  map[string][]foreignCmd
}

// foreignCmd is one such command: its process and its command line, to
// tell it from a later process of the same pid.
type foreignCmd struct {
	pid     int
	cmdline string
}

// take returns the foreign runsc commands on id and forgets them.
func (f *foreignRunsc) take(command, root, id string) []foreignCmd {
	if time.Since(f.since) > runscTimeout {
		return nil
	}
	f.once.Do(func() { f.byID = runscCommands(command, root) })
	f.mu.Lock()
	defer f.mu.Unlock()
	cmds := f.byID[id]
	delete(f.byID, id)
	return cmds
}

// waitForeignRunsc waits until no runsc command on sandbox id runs that an
// earlier process started, and kills any that still runs after
// runscTimeout, the bound this process puts on its own. The caller holds
// id's lock.
func (b *Backend) waitForeignRunsc(ctx context.Context, id string) {
	cmds := b.foreign.take(b.Cmd.Command, b.Cmd.Root, id)
	if len(cmds) == 0 {
		return
	}
	b.Log.Info("waiting for an earlier process's runsc commands on the sandbox to end", "sandbox", id, "commands", len(cmds))
	deadline := time.Now().Add(runscTimeout)
	for {
		cmds = slices.DeleteFunc(cmds, func(c foreignCmd) bool { return !c.running() })
		if len(cmds) == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, c := range cmds {
				unix.Kill(c.pid, unix.SIGKILL)
			}
			b.Log.Warn("killed an earlier process's runsc commands on the sandbox that did not end", "sandbox", id, "commands", len(cmds))
			return
		}
		time.Sleep(orphanPoll)
	}
}

// running reports whether c's process still runs c.
func (c foreignCmd) running() bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(c.pid) + "/cmdline")
	return err == nil && string(b) == c.cmdline
}

// runscCommands returns, by container id, the processes not started by
// this one that run a runsc command (a binary named as command is) with
// state directory root. The sandbox and gofer processes of a container do
// not count: runsc renames them (runsc-sandbox, runsc-gofer).
func runscCommands(command, root string) map[string][]foreignCmd {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	out := map[string][]foreignCmd{}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(root)) {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != filepath.Base(command) || !hasRoot(args, root) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || parentOf(pid) == os.Getpid() {
			continue
		}
		// The container is the last argument of the commands that change
		// state (create, start, delete).
		id := args[len(args)-1]
		out[id] = append(out[id], foreignCmd{pid: pid, cmdline: string(b)})
	}
	return out
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
