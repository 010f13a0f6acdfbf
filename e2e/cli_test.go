package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLI drives the tupper binary's client commands against a real
// `tupper serve`: keys, create, exec, shell, cp, read, write, ls, info,
// timeout and kill, and the errors that say what to do.
// exitTimedOut is `tupper exec`'s status when the sandbox does not answer
// within --timeout and its grace.
const exitTimedOut = 124

func TestCLI(t *testing.T) {
	d := startServeDaemon(t)
	admin := newTupperCLI(t, d, d.Key)

	// keys work on the daemon's database directly, while it runs.
	key := strings.TrimSpace(admin.ok(t, nil, "--root", d.Root, "keys", "create", "--name", "cli"))
	var spare struct {
		Key, ID, Name string
	}
	if err := json.Unmarshal([]byte(admin.ok(t, nil, "--root", d.Root, "keys", "create", "--name", "spare", "--json")), &spare); err != nil {
		t.Fatalf("keys create --json: %v", err)
	}
	var keys []struct{ ID, Name string }
	if err := json.Unmarshal([]byte(admin.ok(t, nil, "--root", d.Root, "keys", "ls", "--json")), &keys); err != nil {
		t.Fatalf("keys ls --json: %v", err)
	}
	if len(keys) != 3 || keys[1].Name != "cli" || keys[2].ID != spare.ID {
		t.Errorf("keys ls = %+v, want the first key, cli and spare", keys)
	}
	if !strings.HasPrefix(key, "e2b_") || !strings.HasPrefix(spare.Key, "e2b_") {
		t.Fatalf("keys create printed %q and %q, want e2b_ keys", key, spare.Key)
	}

	// The rest runs with the key just made.
	cli := newTupperCLI(t, d, key)
	cli.ok(t, nil, "ls")
	spareCLI := newTupperCLI(t, d, spare.Key)
	spareCLI.ok(t, nil, "ls")
	admin.ok(t, nil, "--root", d.Root, "keys", "rm", "spare")
	spareCLI.fails(t, 1, "refused the API key", "ls")
	admin.fails(t, 1, "run `tupper keys ls`", "--root", d.Root, "keys", "rm", "spare")
	cli.fails(t, 1, "cannot reach tupper at http://127.0.0.1:1: start it with `tupper serve`", "ls", "--api-url", "http://127.0.0.1:1")

	id := strings.TrimSpace(cli.ok(t, nil, "create", "--metadata", "suite=cli", "--metadata", "n=1", "--env", "GREETING=hi", "--timeout", "10m"))
	if id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("create printed %q, want an id", id)
	}

	t.Run("exec", func(t *testing.T) {
		res := cli.run(t, nil, "exec", id, "--", `echo "$GREETING"; echo oops >&2; exit 7`)
		if res.code != 7 || res.stdout != "hi\n" || res.stderr != "oops\n" {
			t.Errorf("exec: exit %d, stdout %q, stderr %q; want 7, hi, oops", res.code, res.stdout, res.stderr)
		}
		if out := cli.ok(t, strings.NewReader("hello\nworld"), "exec", "--stdin", id, "--", "tr", "a-z", "A-Z"); out != "HELLO\nWORLD" {
			t.Errorf("exec --stdin: %q", out)
		}
		if out := cli.ok(t, nil, "exec", "--cwd", "/tmp", "--user", "root", "--env", "X=1 2", id, "--", `echo "$(pwd) $(whoami) $X"`); out != "/tmp root 1 2\n" {
			t.Errorf("exec with cwd, user, env: %q", out)
		}
	})

	// A sandbox whose agent is frozen answers nothing: exec --timeout
	// still returns, with timeout(1)'s status and a message that says why.
	t.Run("exec --timeout on a frozen sandbox", func(t *testing.T) {
		frozen := strings.TrimSpace(cli.ok(t, nil, "create", "--timeout", "10m"))
		defer cli.run(t, nil, "kill", frozen)
		// The stop freezes the agent, so this exec never hears its end.
		stop := cli.run(t, nil, "exec", "--timeout", "2s", "--user", "root", frozen, "--", "kill -STOP 1")
		if stop.code != exitTimedOut {
			t.Fatalf("exec of kill -STOP 1: exit %d, stderr %q; want %d", stop.code, stop.stderr, exitTimedOut)
		}
		res := cli.run(t, nil, "exec", "--timeout", "1s", frozen, "--", "true")
		if res.code != exitTimedOut || !strings.Contains(res.stderr, "did not end within --timeout 1s") {
			t.Errorf("exec in a frozen sandbox: exit %d, stderr %q; want %d and why", res.code, res.stderr, exitTimedOut)
		}
	})

	t.Run("shell", func(t *testing.T) {
		res := cli.run(t, strings.NewReader("echo shell-$((6*7))\nexit 3\n"), "shell", id)
		if res.code != 3 || !strings.Contains(res.stdout, "shell-42") {
			t.Errorf("shell: exit %d, output %q; want 3 and shell-42", res.code, res.stdout)
		}
	})

	t.Run("shell in a terminal", func(t *testing.T) {
		term := startInTerminal(t, cli, "shell", id)
		term.send(t, "stty size\r")
		term.expect(t, "24 80")
		// A resize of the local window reaches the sandbox's terminal.
		term.resize(t, 100, 30)
		waitUntil(t, 10*time.Second, "the new size in the sandbox", func() bool {
			term.send(t, "stty size\r")
			time.Sleep(100 * time.Millisecond)
			return strings.Contains(term.output(), "30 100")
		})
		term.send(t, "exit 5\r")
		if code := term.wait(t); code != 5 {
			t.Errorf("shell exited %d, want 5; output:\n%s", code, term.output())
		}
		if !term.restored(t) {
			t.Error("the terminal was not restored after the shell")
		}
	})

	t.Run("cp", func(t *testing.T) {
		dir := t.TempDir()
		data := make([]byte, 3<<20+17)
		rand.Read(data)
		src := filepath.Join(dir, "blob.bin")
		if err := os.WriteFile(src, data, 0o640); err != nil {
			t.Fatal(err)
		}
		cli.ok(t, nil, "cp", src, id+":/home/user/in/")
		cli.ok(t, nil, "cp", id+":/home/user/in/blob.bin", filepath.Join(dir, "back.bin"))
		if got, err := os.ReadFile(filepath.Join(dir, "back.bin")); err != nil || !bytes.Equal(got, data) {
			t.Errorf("the file copied in and out differs (%d bytes, %v)", len(got), err)
		}
		if out := cli.ok(t, nil, "exec", id, "--", "stat -c '%s %U' in/blob.bin"); out != "3145745 user\n" {
			t.Errorf("in the sandbox: %q", out)
		}
		// Into an existing local directory, the file keeps its name.
		cli.ok(t, nil, "cp", id+":in/blob.bin", dir)
		if st, err := os.Stat(filepath.Join(dir, "blob.bin")); err != nil || st.Size() != int64(len(data)) {
			t.Errorf("cp into a directory: %v, %v", st, err)
		}
		cli.fails(t, 1, "is a directory", "cp", dir, id+":/tmp/")
		cli.fails(t, 1, "is a directory", "cp", id+":/home/user", dir)
		cli.fails(t, 1, "ID:PATH", "cp", src, filepath.Join(dir, "x"))
	})

	t.Run("read and write", func(t *testing.T) {
		cli.ok(t, strings.NewReader("written\nby tupper write"), "write", id, "/home/user/w/note.txt")
		if out := cli.ok(t, nil, "read", id, "w/note.txt"); out != "written\nby tupper write" {
			t.Errorf("read: %q", out)
		}
		cli.fails(t, 1, id+":/home/user/nope: no such file", "read", id, "/home/user/nope")
		cli.fails(t, 1, "no such file", "cp", id+":nope", t.TempDir())
	})

	t.Run("ls, info and timeout", func(t *testing.T) {
		var listed []struct {
			SandboxID string
			State     string
			Metadata  map[string]string
		}
		if err := json.Unmarshal([]byte(cli.ok(t, nil, "ls", "--metadata", "suite=cli", "--json")), &listed); err != nil {
			t.Fatal(err)
		}
		if len(listed) != 1 || listed[0].SandboxID != id || listed[0].Metadata["n"] != "1" || listed[0].State != "running" {
			t.Errorf("ls --metadata suite=cli --json = %+v, want %s", listed, id)
		}
		if out := cli.ok(t, nil, "ls", "--metadata", "suite=none", "--json"); strings.TrimSpace(out) != "[]" {
			t.Errorf("ls of nothing = %q, want []", out)
		}
		if out := cli.ok(t, nil, "ls"); !strings.Contains(out, id) || !strings.Contains(out, "n=1,suite=cli") {
			t.Errorf("ls:\n%s", out)
		}
		cli.ok(t, nil, "timeout", id, "3600")
		var info struct {
			SandboxID string
			EndAt     time.Time
		}
		if err := json.Unmarshal([]byte(cli.ok(t, nil, "info", id, "--json")), &info); err != nil {
			t.Fatal(err)
		}
		if info.SandboxID != id || time.Until(info.EndAt) < 50*time.Minute {
			t.Errorf("info after timeout 3600 = %+v", info)
		}
		cli.fails(t, 1, "positive number of seconds", "timeout", id, "0")
	})

	t.Run("kill", func(t *testing.T) {
		var second struct{ SandboxID string }
		if err := json.Unmarshal([]byte(cli.ok(t, nil, "create", "--json")), &second); err != nil || second.SandboxID == "" {
			t.Fatalf("create --json: %+v, %v", second, err)
		}
		cli.ok(t, nil, "kill", id, second.SandboxID)
		cli.fails(t, 1, "sandbox "+id+" not found: run `tupper ls`", "info", id)
		cli.fails(t, 1, "not found", "kill", id)
		cli.fails(t, 1, "not found: run `tupper ls`", "exec", id, "--", "true")
		if out := cli.ok(t, nil, "ls", "--json"); strings.TrimSpace(out) != "[]" {
			t.Errorf("ls after kill = %s", out)
		}
	})
}
