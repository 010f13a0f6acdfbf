package server

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

// envPeerHelper makes TestPeerGroupsHelper, run in a child process, act
// as a peer of the socket it names.
const envPeerHelper = "TUPPER_TEST_PEER_SOCKET"

// peerTestGID is the group the test's socket trusts; no user needs to be
// in it, since the helper, as root, sets its groups itself.
const peerTestGID = 4242

// TestPeerGroupsAtConnect checks that the daemon judges a peer of its
// socket by the groups it connected with, not by what its pid holds when
// the daemon gets to it: a process of uid nobody that connects without
// the trusted group and gains it afterwards (as a new process that takes
// a dead peer's pid would have it) is not trusted, and one that connects
// with the group and then drops it is.
func TestPeerGroupsAtConnect(t *testing.T) {
	testutil.RequiresRoot(t)
	tests := []struct {
		name           string
		before, after  string
		trusted        bool
		wantWithGroups bool
	}{
		{name: "gains the group after connecting", before: "", after: strconv.Itoa(peerTestGID), trusted: false},
		{name: "drops the group after connecting", before: strconv.Itoa(peerTestGID), after: "", trusted: true, wantWithGroups: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not t.TempDir(), whose parent nobody may not enter.
			dir, err := os.MkdirTemp("", "peer-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "t.sock")
			ln, err := ListenSocket(path, SocketOptions{Group: "tupper-test-no-such-group"})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			ln.(*socketListener).trust = &socketTrust{path: path, group: "test", gid: peerTestGID, hasGroup: true}
			// Open to all, so that the daemon's own check is what decides.
			if err := os.Chmod(path, 0o666); err != nil {
				t.Fatal(err)
			}

			cmd := exec.Command(os.Args[0], "-test.run=^TestPeerGroupsHelper$")
			cmd.Env = append(os.Environ(), envPeerHelper+"="+path, "TUPPER_TEST_PEER_BEFORE="+tt.before, "TUPPER_TEST_PEER_AFTER="+tt.after)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				stdin.Close()
				cmd.Wait()
			}()
			// The helper says it is connected, with its groups changed,
			// before the connection is accepted.
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if !strings.HasPrefix(line, "ready") {
				t.Fatalf("the helper: %q, %v", line, err)
			}
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			p := c.(*socketConn).peer
			if p.Err != nil || p.UID != 65534 || p.GID != 65534 {
				t.Fatalf("peer %+v, want uid and gid 65534", p.Peer)
			}
			if p.trusted != tt.trusted || slices.Contains(p.Groups, peerTestGID) != tt.wantWithGroups {
				t.Errorf("peer %+v trusted %v; want trusted %v (the groups it connected with)", p.Peer, p.trusted, tt.trusted)
			}
		})
	}
}

// TestPeerGroupsHelper is TestPeerGroupsAtConnect's peer, in a process of
// its own: as uid nobody with the groups of TUPPER_TEST_PEER_BEFORE, it
// connects to the socket; then, as root again for a moment, it takes the
// groups of TUPPER_TEST_PEER_AFTER, and says "ready". It keeps the
// connection until its stdin closes.
func TestPeerGroupsHelper(t *testing.T) {
	path := os.Getenv(envPeerHelper)
	if path == "" {
		t.Skip("run by TestPeerGroupsAtConnect")
	}
	groups := func(env string) []int {
		var out []int
		for _, f := range strings.Fields(os.Getenv(env)) {
			n, _ := strconv.Atoi(f)
			out = append(out, n)
		}
		return out
	}
	must := func(what string, err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "helper: %s: %v\n", what, err)
			os.Exit(2)
		}
	}
	// The saved uid stays root, so that the helper can come back.
	must("setgroups", syscall.Setgroups(groups("TUPPER_TEST_PEER_BEFORE")))
	must("setresgid", syscall.Setresgid(65534, 65534, 65534))
	must("setresuid", syscall.Setresuid(65534, 65534, 0))
	c, err := net.Dial("unix", path)
	must("connect", err)
	defer c.Close()
	must("seteuid 0", syscall.Setresuid(-1, 0, -1))
	must("setgroups after", syscall.Setgroups(groups("TUPPER_TEST_PEER_AFTER")))
	must("seteuid nobody", syscall.Setresuid(-1, 65534, -1))
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
}
