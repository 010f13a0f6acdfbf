package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/internal/localsock"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// TestLocalSocket drives the CLI and `tupper mcp` through the local socket
// of a real `tupper serve`, with no key anywhere in their environment: root
// and a member of group tupper are let in; another user is refused, by the
// socket's permissions and, were they looser, by the daemon itself.
func TestLocalSocket(t *testing.T) {
	testutil.RequiresRunsc(t)
	// The daemon gives its socket to the group when it starts: the group
	// must be there first.
	gid := ensureGroup(t, localsock.Group)
	d := startServeDaemon(t)
	ctx := context.Background()

	sock := localsock.Of(d.Root)
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatalf("the daemon's socket: %v", err)
	}
	if sys := st.Sys().(*syscall.Stat_t); st.Mode().Perm() != 0o660 || sys.Uid != 0 || sys.Gid != gid {
		t.Errorf("socket %s: mode %v, owner %d:%d; want 0660, root and group %s (%d)", sock, st.Mode().Perm(), sys.Uid, sys.Gid, localsock.Group, gid)
	}
	if !strings.Contains(d.log(), "and on unix://"+sock) {
		t.Errorf("the daemon does not say it listens on %s", sock)
	}

	cli := keylessCLI(t)
	id := strings.TrimSpace(cli.ok(t, nil, "--root", d.Root, "create", "--timeout", "10m"))
	// The socket acts as the default team, whose key the daemon printed.
	if ids := d.sandboxIDs(ctx, t); !slices.Contains(ids, id) {
		t.Errorf("the first key does not see sandbox %s made through the socket: %v", id, ids)
	}
	if out := cli.ok(t, nil, "--root", d.Root, "ls"); !strings.Contains(out, id) {
		t.Errorf("ls through the socket: %q, want %s", out, id)
	}
	if out := cli.ok(t, nil, "--root", d.Root, "exec", id, "--", "echo", "via-socket"); out != "via-socket\n" {
		t.Errorf("exec through the socket: %q", out)
	}
	// $TUPPER_ROOT picks the socket as --root does.
	rootEnv := keylessCLI(t)
	rootEnv.env = append(rootEnv.env, "TUPPER_ROOT="+d.Root)
	if out := rootEnv.ok(t, nil, "info", id); !strings.Contains(out, id) {
		t.Errorf("info with TUPPER_ROOT: %q", out)
	}
	// Over TCP, loopback included, a key is needed as before.
	cli.fails(t, 1, "needs an API key", "--root", d.Root, "ls", "--api-url", d.URL)
	cli.ok(t, nil, "--root", d.Root, "kill", id)
	if ids := d.sandboxIDs(ctx, t); slices.Contains(ids, id) {
		t.Errorf("sandbox %s still runs after kill through the socket", id)
	}

	t.Run("mcp", func(t *testing.T) {
		mcpThroughSocket(t, d)
	})

	t.Run("go sdk", func(t *testing.T) {
		goSDKThroughSocket(t, d)
	})

	t.Run("a user without the group", func(t *testing.T) {
		stranger := keylessCLI(t, "--reuid=nobody", "--regid=nogroup", "--clear-groups")
		stranger.fails(t, 1, "cannot reach tupper serve's socket "+sock+": permission denied; run as root or join the tupper group (or set TUPPER_API_URL and TUPPER_API_KEY)",
			"--root", d.Root, "ls")
		stranger.fails(t, 1, "permission denied; run as root or join the tupper group", "--root", d.Root, "create")
		// Were the socket open to all, the daemon would still refuse.
		if err := os.Chmod(sock, 0o666); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(sock, 0o660)
		stranger.fails(t, 1, "tupper serve's socket "+sock+" lets in root and the members of group tupper without an API key; user nobody (uid 65534) is neither",
			"--root", d.Root, "ls")
		// A key opens it, as over TCP.
		withKey := keylessCLI(t, "--reuid=nobody", "--regid=nogroup", "--clear-groups")
		withKey.env = append(withKey.env, "TUPPER_API_KEY="+d.Key)
		withKey.ok(t, nil, "--root", d.Root, "ls")
	})

	t.Run("a member of the group", func(t *testing.T) {
		name := addUser(t, localsock.Group)
		member := keylessCLI(t, "--reuid="+name, "--regid="+name, "--init-groups")
		if out := member.ok(t, nil, "--root", d.Root, "run", "--", "echo member-$((6*7))"); out != "member-42\n" {
			t.Errorf("run as a member of the group: %q", out)
		}
		member.ok(t, nil, "--root", d.Root, "ls")
	})
}

// mcpThroughSocket runs `tupper mcp` as an MCP client starts it, with no key
// and no URL, and checks that its sandboxes are the daemon's.
func mcpThroughSocket(t *testing.T, d *serveDaemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cli := keylessCLI(t)
	cmd := exec.Command(cli.bin, "--root", d.Root, "mcp")
	cmd.Env = cli.env
	logPath := filepath.Join(t.TempDir(), "mcp.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("tupper mcp's log:\n%s", b)
		}
	}()
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcpsdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("start tupper mcp: %v", err)
	}
	defer cs.Close()
	call := func(tool string, args map[string]any, out any) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: tool, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", tool, err, res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s answered %s: %v", tool, b, err)
		}
	}
	var made struct {
		Sandbox struct {
			ID string `json:"sandbox_id"`
		} `json:"sandbox"`
	}
	call("create_sandbox", map[string]any{}, &made)
	if ids := d.sandboxIDs(ctx, t); !slices.Contains(ids, made.Sandbox.ID) {
		t.Errorf("the daemon does not run the MCP sandbox %q: %v", made.Sandbox.ID, ids)
	}
	var ran struct {
		Stdout   string `json:"stdout"`
		ExitCode *int   `json:"exit_code"`
	}
	call("run_command", map[string]any{"sandbox": made.Sandbox.ID, "command": "echo mcp-$((6*7))"}, &ran)
	if ran.Stdout != "mcp-42\n" || ran.ExitCode == nil || *ran.ExitCode != 0 {
		t.Errorf("run_command through the socket: %+v", ran)
	}
	var killed struct {
		Killed bool `json:"killed"`
	}
	call("kill_sandbox", map[string]any{"sandbox": made.Sandbox.ID}, &killed)
	if ids := d.sandboxIDs(ctx, t); slices.Contains(ids, made.Sandbox.ID) {
		t.Errorf("the MCP sandbox %s still runs after kill_sandbox", made.Sandbox.ID)
	}
}

// TestRunOneShot runs `tupper run -- echo hi` with a daemon on its root,
// through the daemon (an embedded engine would find the root taken), and
// with none, in an engine of its own.
func TestRunOneShot(t *testing.T) {
	testutil.RequiresRunsc(t)
	cli := keylessCLI(t)
	t.Run("with the daemon", func(t *testing.T) {
		d := startServeDaemon(t)
		res := cli.run(t, nil, "--root", d.Root, "run", "--", "echo", "hi")
		if res.code != 0 || res.stdout != "hi\n" {
			t.Fatalf("run with the daemon: exit %d, stdout %q, stderr %q; want hi", res.code, res.stdout, res.stderr)
		}
		// Output streams and the exit code come through; the sandbox goes.
		res = cli.run(t, nil, "--root", d.Root, "run", "--env", "W=world", "--", `echo "hello $W"; echo oops >&2; exit 3`)
		if res.code != 3 || res.stdout != "hello world\n" || !strings.Contains(res.stderr, "oops") {
			t.Errorf("run with the daemon: exit %d, stdout %q, stderr %q; want 3, hello world, oops", res.code, res.stdout, res.stderr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if ids := d.sandboxIDs(ctx, t); len(ids) != 0 {
			t.Errorf("sandboxes of tupper run still run on the daemon: %v", ids)
		}
	})
	t.Run("without a daemon", func(t *testing.T) {
		root := mcpShortDir(t, "trun-")
		res := cli.run(t, nil, "--root", root, "run", "--image-root", baseTemplate(t), "--", "echo", "hi")
		if res.code != 0 || res.stdout != "hi\n" {
			t.Fatalf("run without a daemon: exit %d, stdout %q, stderr %q; want hi", res.code, res.stdout, res.stderr)
		}
		if left := testutil.Leftovers(t, testutil.Leaks{Root: root}); len(left) > 0 {
			t.Errorf("tupper run left behind:\n%s", strings.Join(left, "\n"))
		}
	})
}

// keylessCLI runs the tupper binary with none of the caller's TUPPER_* or
// E2B_* settings, so with no key and no URL; with setpriv options, as
// another user through setpriv(1), from a copy of the binary that user may
// run.
func keylessCLI(t *testing.T, setpriv ...string) *tupperCLI {
	t.Helper()
	bin, _ := e2eBinaries(t)
	env := envWithoutTupper()
	if len(setpriv) == 0 {
		return &tupperCLI{bin: bin, env: env}
	}
	// A script that runs the public copy through setpriv stands in for
	// the binary.
	pub := publicBinary(t, bin)
	script := filepath.Join(filepath.Dir(pub), "tupper-as-user")
	body := "#!/bin/sh\nexec setpriv " + strings.Join(setpriv, " ") + " " + pub + ` "$@"` + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return &tupperCLI{bin: script, env: env}
}

// publicBinary copies bin where every user may run it: the built binaries
// sit in a directory of root's alone.
func publicBinary(t *testing.T, bin string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tupper-pub-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	path := filepath.Join(dir, "tupper")
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// ensureGroup makes group name unless it exists, removes it at the end of
// the test when it made it, and returns its id.
func ensureGroup(t *testing.T, name string) uint32 {
	t.Helper()
	if _, err := user.LookupGroup(name); err != nil {
		if out, err := exec.Command("groupadd", "--system", name).CombinedOutput(); err != nil {
			t.Fatalf("groupadd %s: %v: %s", name, err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("groupdel", name).CombinedOutput(); err != nil {
				t.Errorf("groupdel %s: %v: %s", name, err, out)
			}
		})
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		t.Fatal(err)
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(gid)
}

// addUser makes a system user, member of group, for the test's length, and
// returns its name.
func addUser(t *testing.T, group string) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := "tupe2e" + hex.EncodeToString(b)
	if out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin",
		"--groups", group, name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	return name
}

// goSDKThroughSocket runs the Go SDK with an unix:// URL and no key, as a
// program on the daemon's host does, and hands the URLs it signs to plain
// HTTP clients, as its users do: they point at the daemon's TCP address,
// where anyone holding them can use them, not at the socket only the SDK
// can reach.
func goSDKThroughSocket(t *testing.T, d *serveDaemon) {
	ctx := context.Background()
	tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: localsock.URL(localsock.Of(d.Root))})
	if err != nil {
		t.Fatal(err)
	}
	client := &sdk.Client{Transport: tr}
	sb, err := client.Create(ctx, sdk.CreateOptions{Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatalf("create through the socket with the Go SDK: %v", err)
	}
	defer sb.Kill(context.Background())
	if _, err := sb.Files.Write(ctx, "/home/user/shared.txt", []byte("handed over")); err != nil {
		t.Fatal(err)
	}
	down, err := sb.DownloadURL("/home/user/shared.txt", sdk.URLOptions{Expires: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(down, d.URL+"/files?") {
		t.Fatalf("DownloadURL through the socket = %q, want one at the daemon's address %s", down, d.URL)
	}
	resp, err := http.Get(down)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "handed over" {
		t.Errorf("GET of the signed URL: %d %q", resp.StatusCode, body)
	}
}
