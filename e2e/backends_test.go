package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/sdk"
)

// TestBackendPerSandbox drives a daemon whose default is gVisor as a user
// choosing the backend per sandbox would: the Go SDK's create field and
// `tupper create --backend`, a sandbox on each backend side by side, the
// listing saying which runs where, and a name the daemon lacks refused
// with the names it has.
func TestBackendPerSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("boots sandboxes on two backends")
	}
	requireRunc(t)
	d := startServeDaemon(t)
	ctx := context.Background()
	c := goClient(t, d)

	onGVisor, err := c.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer onGVisor.Kill(ctx)
	onRunc, err := c.Create(ctx, sdk.CreateOptions{Backend: "runc"})
	if err != nil {
		t.Fatal(err)
	}
	defer onRunc.Kill(ctx)
	// gVisor maps the whole id space onto itself; runc a range of its own.
	if m := strings.Fields(mustRun(ctx, t, onGVisor, "cat /proc/self/uid_map")); len(m) != 3 || m[1] != "0" {
		t.Errorf("the default sandbox's uid_map %q is not gVisor's", m)
	}
	if m := strings.Fields(mustRun(ctx, t, onRunc, "cat /proc/self/uid_map")); len(m) != 3 || m[1] == "0" {
		t.Errorf("the runc sandbox's uid_map %q is not a container's", m)
	}
	for sb, want := range map[*sdk.Sandbox]string{onGVisor: "gvisor", onRunc: "runc"} {
		info, err := sb.GetInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Backend != want {
			t.Errorf("sandbox %s: backend %q, want %q", sb.ID(), info.Backend, want)
		}
	}

	cli := func(args ...string) (string, error) {
		cmd := exec.Command(d.tupper, args...)
		cmd.Env = append(os.Environ(), "TUPPER_API_URL="+d.URL, "TUPPER_API_KEY="+d.Key, "TUPPER_ROOT=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	id, err := cli("create", "--backend", "runc")
	if err != nil {
		t.Fatalf("tupper create --backend runc: %v\n%s", err, id)
	}
	id = strings.TrimSpace(id)
	defer cli("kill", id)
	out, err := cli("ls")
	if err != nil {
		t.Fatalf("tupper ls: %v\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, id) && !strings.Contains(line, "runc") {
			t.Errorf("tupper ls does not say %s runs on runc: %q", id, line)
		}
	}
	out, err = cli("create", "--backend", "nope")
	if err == nil || !strings.Contains(out, "gvisor") || !strings.Contains(out, "runc") {
		t.Errorf("create --backend nope: %v\n%s; want a refusal naming the known backends", err, out)
	}
}
