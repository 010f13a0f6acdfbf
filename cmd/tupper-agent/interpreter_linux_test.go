package main

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestSetTokenStopsASilentInterpreter checks the fallback of a token
// change: a server that does not acknowledge the new token (hung, or its
// channel broken) is killed, with its process group, before setToken
// returns, so that no server goes on taking the old token; the next one
// starts with the new.
func TestSetTokenStopsASilentInterpreter(t *testing.T) {
	// A process group leader standing for the server, with a child of
	// its own standing for a kernel. Both hold the pipe's write end: its
	// read end ends when both are gone.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("sh", "-c", "sleep 600 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})

	ours, theirs := net.Pipe()
	received := make(chan string, 1)
	go func() {
		// Read the token, never acknowledge it.
		var tok string
		json.NewDecoder(bufio.NewReader(theirs)).Decode(&tok)
		received <- tok
		io.Copy(io.Discard, theirs)
	}()
	s := &interpreterSupervisor{log: slog.New(slog.DiscardHandler), ackTimeout: 200 * time.Millisecond, token: "old-token-0123456789"}
	s.live = &interpreterServer{conn: ours, pid: cmd.Process.Pid, exited: exited}

	s.setToken("new-token-0123456789")
	select {
	case <-exited:
	default:
		t.Fatal("setToken returned with the silent server still running")
	}
	// Bounded only so that a failure does not wait for sleep's end.
	r.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadAll(r); err != nil {
		t.Errorf("the server's child outlived it: %v", err)
	}
	if got := <-received; got != "new-token-0123456789" {
		t.Errorf("the server was sent %q", got)
	}
	if s.live != nil || s.token != "new-token-0123456789" {
		t.Errorf("after: live %v, token %q; want no server and the new token for the next", s.live, s.token)
	}
}
