package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// TestNeighbours runs Tupper on a stand-in host (a network namespace with
// its own uplink, firewall and sysctls: testutil.StandInHost) beside each
// firewall that drops forwarded traffic in its own way, and checks that
// sandboxes keep their egress, that a sandbox without internet access is
// refused at once, and that Tupper breaks nothing of its neighbours':
// Debian's real dockerd in both orders (Docker before Tupper, and Tupper,
// with a sandbox, before Docker) with iptables-nft and with
// iptables-legacy, real ufw enabled, firewalld, Docker beside each of
// them, and a FORWARD policy of DROP set by hand (with INPUT dropped too). In each, the sandboxes' lookups reach
// their resolver, the daemon, at once.
func TestNeighbours(t *testing.T) {
	if testing.Short() {
		t.Skip("boots dockerd and gVisor sandboxes on stand-in hosts")
	}
	testutil.RequiresRunsc(t)
	for _, tc := range []struct {
		name string
		// docker starts dockerd, with iptables-legacy when legacy, before
		// Tupper's first sandbox when first, else after it.
		docker, legacy, first      bool
		ufw, firewalld, dropPolicy bool
		// added is a command that lists the host's firewall, and what it
		// must show of Tupper's.
		added []string
	}{
		{name: "docker-nft-first", docker: true, first: true, added: []string{"iptables-nft -S", "-A DOCKER-USER -i tp+ -m comment --comment tupper -j ACCEPT"}},
		{name: "docker-nft-after", docker: true, added: []string{"iptables-nft -S", "-A DOCKER-USER -i tp+ -m comment --comment tupper -j ACCEPT"}},
		{name: "docker-legacy-first", docker: true, legacy: true, first: true, added: []string{"iptables-legacy -S", "-A DOCKER-USER -i tp+ -m comment --comment tupper -j ACCEPT"}},
		{name: "docker-legacy-after", docker: true, legacy: true, added: []string{"iptables-legacy -S", "-A DOCKER-USER -i tp+ -m comment --comment tupper -j ACCEPT"}},
		{name: "ufw", ufw: true, added: []string{"iptables-nft -S", "-A ufw-user-forward -i tp+ -j ACCEPT"}},
		{name: "firewalld", firewalld: true, added: []string{"firewall-cmd --zone=tupper --list-all", "sources: 10.213.0.0/16"}},
		// Docker beside ufw and beside firewalld, as many hosts run them.
		{name: "ufw-docker", ufw: true, docker: true, first: true, added: []string{"iptables-nft -S", "-A DOCKER-USER -i tp+ -m comment --comment tupper -j ACCEPT"}},
		{name: "firewalld-docker", firewalld: true, docker: true, added: []string{"firewall-cmd --zone=tupper --list-all", "sources: 10.213.0.0/16 fd74:7570:7065::/64"}},
		{name: "forward-drop-legacy", dropPolicy: true, legacy: true, added: []string{"iptables-legacy -S", "-A FORWARD -i tp+ -m comment --comment tupper -j ACCEPT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var shadow []string
			if tc.ufw {
				requireTool(t, "ufw")
				shadow = append(shadow, "/etc/ufw", "/etc/default/ufw")
			}
			if tc.firewalld {
				requireTool(t, "firewalld")
				shadow = append(shadow, "/etc/firewalld")
			}
			h := testutil.NewStandInHost(t, shadow...)
			switch {
			case tc.ufw:
				// Debian's ufw drops forwarded traffic by default, as
				// Ubuntu's does.
				if out := h.Run(t, "cat", "/etc/default/ufw"); !strings.Contains(out, `DEFAULT_FORWARD_POLICY="DROP"`) {
					t.Fatalf("ufw's default forward policy is not DROP:\n%s", out)
				}
				h.Run(t, "ufw", "--force", "enable")
			case tc.firewalld:
				startFirewalld(t, h)
			case tc.dropPolicy:
				iptables := "iptables-nft"
				if tc.legacy {
					iptables = "iptables-legacy"
				}
				// A firewall made by hand: loopback and replies in,
				// nothing else; nothing forwarded.
				h.Run(t, iptables, "-A", "INPUT", "-i", "lo", "-j", "ACCEPT")
				h.Run(t, iptables, "-A", "INPUT", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
				h.Run(t, iptables, "-P", "INPUT", "DROP")
				h.Run(t, iptables, "-P", "FORWARD", "DROP")
			}
			var dk *dockerd
			if tc.docker && tc.first {
				dk = startDockerd(t, h, tc.legacy)
			}
			d := serveOn(t, h)
			client := standInClient(t, h, d)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			open := createSandbox(ctx, t, client, true)
			if tc.docker && !tc.first {
				// Tupper turned forwarding on for its sandbox, and put its
				// guard up, before Docker came.
				if got := h.Sysctl(t, "net/ipv4/ip_forward"); got != "1" {
					t.Errorf("ip_forward %s after Tupper's first sandbox, want 1", got)
				}
				dk = startDockerd(t, h, tc.legacy)
			}
			closed := createSandbox(ctx, t, client, false)

			// Sandboxes reach the fake internet, and one without internet
			// access is refused at once.
			world := "http://" + testutil.StandInWorld.String() + "/"
			if out := sandboxCurl(ctx, t, open, world); !strings.Contains(out, "world") || !strings.Contains(out, "rc=0") {
				t.Errorf("sandbox to the fake internet: %s", out)
			}
			// The host has an IPv6 route out, so sandboxes get IPv6 egress.
			if out := sandboxCurl(ctx, t, open, "http://["+testutil.StandInWorld6.String()+"]/"); !strings.Contains(out, "world") {
				t.Errorf("sandbox to the fake internet over IPv6: %s", out)
			}
			expectRefused(ctx, t, closed, world)
			expectResolverAnswers(ctx, t, open)
			// A service of the host's, on every address: the accepts
			// Tupper added to the host's firewall (ufw's and firewalld's
			// reach the input hook) open nothing of the host's.
			serveOnHost(t, h, "8081")
			expectRefused(ctx, t, open, "http://"+h.UplinkAddr().String()+":8081/")
			if dk != nil {
				dk.checkNeighbourhood(ctx, t, open)
			}
			list := strings.Fields(tc.added[0])
			fw := h.Run(t, list[0], list[1:]...)
			if !strings.Contains(fw, tc.added[1]) {
				t.Errorf("%s -S lacks Tupper's %q:\n%s", tc.added[0], tc.added[1], fw)
			}
			out := h.Run(t, d.tupper, "doctor")
			if !strings.Contains(out, "Tupper's accept for sandboxes is in") {
				t.Errorf("doctor does not say what Tupper added to the host's firewall:\n%s", out)
			}
		})
	}
}

// serveOn starts `tupper serve` on h, with args, in a state directory of
// its own. Its sandboxes' lookups go to the fake internet, which has no
// DNS server: each fails at once (port unreachable), so a slow one says
// the host's firewall keeps it from the daemon.
func serveOn(t *testing.T, h *testutil.StandInHost, args ...string) *serveDaemon {
	t.Helper()
	root, err := os.MkdirTemp("", "te-")
	if err != nil {
		t.Fatal(err)
	}
	return startServeDaemonOn(t, h, root, append([]string{"--dns-upstream", testutil.StandInWorld.String()}, args...)...)
}

// serveOnHost serves HTTP on port of every address of h until t ends.
func serveOnHost(t *testing.T, h *testutil.StandInHost, port string) {
	t.Helper()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		testutil.Skip(t, "busybox is not installed (busybox-static)")
	}
	cmd := h.Command(context.Background(), busybox, "httpd", "-f", "-p", "0.0.0.0:"+port, "-h", h.Dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitUntil(t, 10*time.Second, "the host's service listens", func() bool {
		c, err := h.Dial(context.Background(), "tcp", h.UplinkAddr().String()+":"+port)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// standInClient returns an SDK client of d, which runs on h.
func standInClient(t *testing.T, h *testutil.StandInHost, d *serveDaemon) *sdk.Client {
	t.Helper()
	tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: d.URL, APIKey: d.Key,
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: h.Dial}}})
	if err != nil {
		t.Fatal(err)
	}
	return &sdk.Client{Transport: tr}
}

// createSandbox makes a sandbox with or without internet access, killed
// at the end of the test.
func createSandbox(ctx context.Context, t *testing.T, c *sdk.Client, internet bool) *sdk.Sandbox {
	t.Helper()
	sb, err := c.Create(ctx, sdk.CreateOptions{AllowInternetAccess: &internet, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatalf("create a sandbox (internet %v): %v", internet, err)
	}
	t.Cleanup(func() {
		kctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sb.Kill(kctx)
	})
	return sb
}

// sandboxCurl fetches url in sb and returns what curl printed, its exit
// code (rc=N) and how long it took (time=SECONDS).
func sandboxCurl(ctx context.Context, t *testing.T, sb *sdk.Sandbox, url string) string {
	t.Helper()
	res, err := sb.Commands.Run(ctx, fmt.Sprintf(`sh -c 'curl -sS --max-time 5 -w "\ntime=%%{time_total}\n" %s; echo rc=$?' 2>&1`, url))
	if err != nil {
		t.Fatalf("curl %s in the sandbox: %v", url, err)
	}
	return res.Stdout + res.Stderr
}

// expectRefused checks that sb's connection to url is refused (curl's
// exit code 7) within a second.
func expectRefused(ctx context.Context, t *testing.T, sb *sdk.Sandbox, url string) {
	t.Helper()
	out := sandboxCurl(ctx, t, sb, url)
	if !strings.Contains(out, "rc=7") {
		t.Errorf("sandbox to %s: %s; want connection refused (curl exit 7)", url, out)
		return
	}
	i := strings.Index(out, "time=")
	secs, err := strconv.ParseFloat(strings.Fields(out[i+len("time="):])[0], 64)
	if err != nil || secs > 1 {
		t.Errorf("sandbox to %s: refused after %v s, want within a second: %s", url, secs, out)
	}
}

// expectResolverAnswers checks that sb's resolver, the daemon on the
// host, answers a lookup within two seconds: the host's firewall lets a
// sandbox's DNS reach the daemon. The stand-in host has no upstream
// resolver, so the answer is a failure, but a quick one.
func expectResolverAnswers(ctx context.Context, t *testing.T, sb *sdk.Sandbox) {
	t.Helper()
	res, err := sb.Commands.Run(ctx, `sh -c 's=$(date +%s%N); getent hosts nowhere.test; rc=$?; e=$(date +%s%N); echo rc=$rc ms=$(( (e-s)/1000000 ))'`)
	if err != nil {
		t.Fatalf("a lookup in the sandbox: %v", err)
	}
	out := res.Stdout + res.Stderr
	i := strings.Index(out, "ms=")
	ms, err := strconv.Atoi(strings.TrimSpace(out[i+3:]))
	if i < 0 || err != nil || ms > 2000 {
		t.Errorf("the sandbox's resolver did not answer within 2 s: %s", out)
	}
}

// sandboxAddr returns sb's address.
func sandboxAddr(ctx context.Context, t *testing.T, sb *sdk.Sandbox) string {
	t.Helper()
	res, err := sb.Commands.Run(ctx, `sh -c 'echo $TUPPER_SANDBOX_ADDR'`)
	if err != nil || strings.TrimSpace(res.Stdout) == "" {
		// The agent may not pass the daemon's variables on: ask the
		// kernel.
		res, err = sb.Commands.Run(ctx, `sh -c "ip -4 -o addr show eth0 2>/dev/null | awk '{print \$4}' | cut -d/ -f1 || hostname -I"`)
	}
	if err != nil {
		t.Fatalf("sandbox address: %v", err)
	}
	return strings.Fields(res.Stdout + " ?")[0]
}

// requireTool skips (or, under TUPPER_REQUIRE_ALL, fails) t unless tool
// is installed.
func requireTool(t *testing.T, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		testutil.Skip(t, tool+" is not installed: run scripts/setup.sh --test")
	}
}

// dockerd is Debian's dockerd on a stand-in host, with its own data, its
// own socket and two containers from a busybox image made here (no
// registry): c1 serves "container" over HTTP on :80, c2 is a client.
type dockerd struct {
	h    *testutil.StandInHost
	sock string
	// c1 is the address of the container that serves.
	c1 string
}

// startDockerd starts dockerd on h, with iptables-legacy when legacy (its
// iptables is then iptables-legacy), and its two containers; it stops it
// when t ends.
func startDockerd(t *testing.T, h *testutil.StandInHost, legacy bool) *dockerd {
	t.Helper()
	requireTool(t, "dockerd")
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		testutil.Skip(t, "busybox is not installed (busybox-static)")
	}
	// containerd's socket path must stay short.
	execRoot, err := os.MkdirTemp("", "td-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(execRoot) })
	d := &dockerd{h: h, sock: filepath.Join(execRoot, "docker.sock")}
	env := os.Environ()
	if legacy {
		bin := filepath.Join(h.Dir, "legacy-bin")
		os.MkdirAll(bin, 0o755)
		for _, name := range []string{"iptables", "ip6tables"} {
			if err := os.Symlink("/usr/sbin/"+name+"-legacy", filepath.Join(bin, name)); err != nil {
				t.Fatal(err)
			}
		}
		env = append(env, "PATH="+bin+":"+os.Getenv("PATH"))
	}
	logf, err := os.Create(filepath.Join(h.Dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(context.Background(), "dockerd", "--data-root", filepath.Join(h.Dir, "docker"),
		"--exec-root", execRoot, "--pidfile", filepath.Join(execRoot, "docker.pid"), "-H", "unix://"+d.sock,
		"--userland-proxy=false")
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("dockerd's log:\n%s", tailLines(string(b), 40))
		}
	})
	waitUntil(t, 30*time.Second, "dockerd answers", func() bool {
		_, err := d.docker("version")
		return err == nil
	})

	// A busybox image from a rootfs tarball.
	var img bytes.Buffer
	tw := tar.NewWriter(&img)
	bb, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb))})
	tw.Write(bb)
	// busybox-static's wget crashes without the files of a full system;
	// its nc does not.
	for _, app := range []string{"sh", "httpd", "nc", "sleep"} {
		tw.WriteHeader(&tar.Header{Name: "bin/" + app, Typeflag: tar.TypeSymlink, Linkname: "busybox"})
	}
	page := []byte("container\n")
	tw.WriteHeader(&tar.Header{Name: "www/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "www/index.html", Mode: 0o644, Size: int64(len(page))})
	tw.Write(page)
	tw.Close()
	imp := exec.Command("docker", "-H", "unix://"+d.sock, "import", "-", "tupper-test/busybox")
	imp.Stdin = &img
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v: %s", err, out)
	}
	for _, c := range [][]string{
		{"run", "-d", "--name", "c1", "-p", "8080:80", "tupper-test/busybox", "/bin/httpd", "-f", "-p", "80", "-h", "/www"},
		{"run", "-d", "--name", "c2", "tupper-test/busybox", "/bin/sleep", "3600"},
	} {
		if out, err := d.docker(c...); err != nil {
			t.Fatalf("docker %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	out, err := d.docker("inspect", "-f", "{{.NetworkSettings.IPAddress}}", "c1")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("docker inspect c1: %v: %s", err, out)
	}
	d.c1 = strings.TrimSpace(out)
	return d
}

// docker runs the docker CLI against d.
func (d *dockerd) docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", append([]string{"-H", "unix://" + d.sock}, args...)...).CombinedOutput()
	return string(out), err
}

// checkNeighbourhood checks that Docker's containers reach each other and
// the fake internet, that sandbox sb cannot reach a container, and is
// refused at once, and that no container reaches into sb.
func (d *dockerd) checkNeighbourhood(ctx context.Context, t *testing.T, sb *sdk.Sandbox) {
	t.Helper()
	if out, err := d.get("c2", d.c1, "80", 5); err != nil || !strings.Contains(out, "container") {
		t.Errorf("container to container across docker0: %v: %s", err, out)
	}
	if out, err := d.get("c2", testutil.StandInWorld.String(), "80", 5); err != nil || !strings.Contains(out, "world") {
		t.Errorf("container to the fake internet: %v: %s", err, out)
	}
	expectRefused(ctx, t, sb, "http://"+d.c1+"/")
	// c1's port published on the host's address: Docker's DNAT turns
	// the connection towards c1, and the sandbox's chain sees c1.
	if out, err := h2world(d.h); err != nil || !strings.Contains(out, "container") {
		t.Errorf("c1's published port from the uplink's neighbour: %v: %s", err, out)
	}
	expectRefused(ctx, t, sb, "http://"+d.h.UplinkAddr().String()+":8080/")
	addr := sandboxAddr(ctx, t, sb)
	// The agent listens on 49983 in every sandbox.
	if out, err := d.get("c2", addr, "49983", 3); err == nil {
		t.Errorf("a container reached into the sandbox at %s: %s", addr, out)
	}
}

// h2world fetches c1's page through the port the host publishes, from
// the fake internet, as a client of the published port would.
func h2world(h *testutil.StandInHost) (string, error) {
	return h.RunInWorld("sh", "-c", fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | busybox nc -w 3 %s 8080`, h.UplinkAddr()))
}

// get sends an HTTP GET from container to addr:port with busybox's nc,
// waiting at most secs to connect, and returns the answer.
func (d *dockerd) get(container, addr, port string, secs int) (string, error) {
	return d.docker("exec", container, "sh", "-c",
		fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w %d %s %s`, secs, addr, port))
}

// TestHostFirewallOff checks `tupper serve --host-firewall=off` beside
// Docker: Tupper adds nothing to Docker's chains, so sandboxes have no
// egress; serve warns at start with the commands that let them through;
// doctor prints the same; once they are run, sandboxes reach the fake
// internet; and the daemon's stop leaves them where the operator put them.
func TestHostFirewallOff(t *testing.T) {
	if testing.Short() {
		t.Skip("boots dockerd and gVisor sandboxes on a stand-in host")
	}
	testutil.RequiresRunsc(t)
	h := testutil.NewStandInHost(t)
	startDockerd(t, h, false)
	d := serveOn(t, h, "--host-firewall=off")
	const cmd = "iptables-nft -w 5 -I DOCKER-USER 1 -i tp+ -m comment --comment tupper -j ACCEPT"
	if log := d.log(); !strings.Contains(log, "Docker (iptables-nft) drops sandboxes' traffic") || !strings.Contains(log, cmd) {
		t.Errorf("serve did not warn with the commands to run:\n%s", tailLines(log, 40))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sb := createSandbox(ctx, t, standInClient(t, h, d), true)
	world := "http://" + testutil.StandInWorld.String() + "/"
	if out := sandboxCurl(ctx, t, sb, world); strings.Contains(out, "world") {
		t.Errorf("a sandbox reached the fake internet through Docker's FORWARD DROP, which Tupper was to leave alone: %s", out)
	}
	if fw := h.Run(t, "iptables-nft", "-S"); strings.Contains(fw, "tupper") {
		t.Errorf("Tupper changed Docker's chains:\n%s", fw)
	}
	out, _ := h.Try(d.tupper, "doctor")
	var fixes []string
	for _, line := range strings.Split(out, "\n") {
		if f, ok := strings.CutPrefix(strings.TrimSpace(line), "fix: iptables-nft"); ok {
			fixes = strings.Split("iptables-nft"+f, "; ")
		}
	}
	if len(fixes) != 2 || fixes[0] != cmd {
		t.Fatalf("doctor does not print the commands to run: %v\n%s", fixes, out)
	}
	for _, f := range fixes {
		args := strings.Fields(f)
		h.Run(t, args[0], args[1:]...)
	}
	if out := sandboxCurl(ctx, t, sb, world); !strings.Contains(out, "world") {
		t.Errorf("the sandbox does not reach the fake internet after doctor's commands: %s", out)
	}
	if out, _ := h.Try(d.tupper, "doctor"); !strings.Contains(out, "Tupper's accept for sandboxes is in DOCKER-USER") {
		t.Errorf("doctor does not see the accept in place:\n%s", out)
	}
	sb.Kill(ctx)
	d.stop(t)
	if fw := h.Run(t, "iptables-nft", "-S", "DOCKER-USER"); !strings.Contains(fw, "-i tp+ -m comment --comment tupper -j ACCEPT") {
		t.Errorf("the daemon's stop removed the accept the operator added:\n%s", fw)
	}
}

// TestHostLeftAsFound checks that the host's network is left as Tupper
// found it when `tupper serve` stops with no sandbox left: no nftables
// table, sandbox interface, route, record or lock file (85 of them had
// piled up on a test host), ufw's route rule gone, forwarding back off;
// and the same after a SIGKILL, a restart and a stop. In between, doctor
// and `tupper cleanup` say what is left and why it stays.
func TestHostLeftAsFound(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes on a stand-in host")
	}
	testutil.RequiresRunsc(t)
	requireTool(t, "ufw")
	h := testutil.NewStandInHost(t, "/etc/ufw", "/etc/default/ufw")
	h.Run(t, "ufw", "--force", "enable")
	// Lock files of pools long gone, as a day of test runs left them.
	h.Run(t, "sh", "-c", "mkdir -p /run/tupper && for i in 1 2 3 4 5; do touch /run/tupper/netpool-10-99-0-0_16.lock.$i; done")
	d := serveOn(t, h)
	client := standInClient(t, h, d)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	world := "http://" + testutil.StandInWorld.String() + "/"

	// Start, a sandbox online through ufw, stop.
	sb := createSandbox(ctx, t, client, true)
	if out := sandboxCurl(ctx, t, sb, world); !strings.Contains(out, "world") {
		t.Fatalf("sandbox to the fake internet: %s", out)
	}
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if h.Sysctl(t, key) != "1" {
			t.Errorf("%s is not on while a sandbox has egress (IPv6 too: the host has an IPv6 route)", key)
		}
	}
	if out, _ := h.Try("ufw", "show", "added"); !strings.Contains(out, "ufw route allow in on tp+ comment 'tupper'") {
		t.Errorf("ufw lacks Tupper's route rule:\n%s", out)
	}
	// A cleanup asked for while the daemon runs changes nothing.
	if out := h.Run(t, d.tupper, "cleanup"); !strings.Contains(out, "nothing removed: another Tupper process uses the network") {
		t.Errorf("tupper cleanup beside a running daemon: %s", out)
	}
	if out := sandboxCurl(ctx, t, sb, world); !strings.Contains(out, "world") {
		t.Errorf("sandbox to the fake internet after a cleanup was asked for: %s", out)
	}
	if err := sb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	d.stop(t)
	checkLeftAsFound(t, h)
	if !strings.Contains(d.log(), "the host is left as found") {
		t.Errorf("the daemon's log does not say it cleaned up:\n%s", tailLines(d.log(), 20))
	}

	// Start, a sandbox, SIGKILL: the sandbox runs on, and what it needs
	// stays, whatever cleans up.
	d.start(t)
	client = standInClient(t, h, d)
	sb = createSandbox(ctx, t, client, true)
	d.crash(t)
	out, _ := h.Try(d.tupper, "doctor")
	if !strings.Contains(out, "no Tupper process holds the host's network, and these are left: nftables table inet tupper; 1 sandbox interfaces") ||
		!strings.Contains(out, "fix: sandboxes outlived their daemon: tupper serve takes them back; once none is left, tupper cleanup") {
		t.Errorf("doctor after a SIGKILL does not name what is left:\n%s", out)
	}
	out = h.Run(t, d.tupper, "cleanup")
	if !strings.Contains(out, "nothing removed: 1 sandbox interfaces remain") {
		t.Errorf("tupper cleanup with a sandbox left: %s", out)
	}
	// Restart: the daemon takes its sandbox back, online still; kill it,
	// stop.
	d.start(t)
	client = standInClient(t, h, d)
	sb, err := client.Connect(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out := sandboxCurl(ctx, t, sb, world); !strings.Contains(out, "world") {
		t.Errorf("sandbox to the fake internet after its daemon was killed and started again: %s", out)
	}
	if err := client.Kill(ctx, sb.ID()); err != nil {
		t.Fatal(err)
	}
	d.stop(t)
	checkLeftAsFound(t, h)
	out = h.Run(t, d.tupper, "doctor", "--fix")
	if !strings.Contains(out, "nothing to remove: the host's network is as Tupper found it") || !strings.Contains(out, "leftovers        none") {
		t.Errorf("doctor --fix on a clean host:\n%s", out)
	}
}

// checkLeftAsFound fails t if h holds anything of Tupper's network.
func checkLeftAsFound(t *testing.T, h *testutil.StandInHost) {
	t.Helper()
	if out := h.Run(t, "nft", "list", "tables"); strings.Contains(out, "inet tupper") {
		t.Errorf("the table is left:\n%s", out)
	}
	if out := h.Run(t, "ip", "-o", "link"); strings.Contains(out, "tupper:") || strings.Contains(out, ": tp") {
		t.Errorf("sandbox interfaces are left:\n%s", out)
	}
	if out := h.Run(t, "ip", "route", "show", "type", "unreachable"); strings.TrimSpace(out) != "" {
		t.Errorf("routes are left:\n%s", out)
	}
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if got := h.Sysctl(t, key); got != "0" {
			t.Errorf("%s is %s, as Tupper turned it; it was 0", key, got)
		}
	}
	// Tupper raised it to 2 so that the uplink kept its router
	// advertisements while forwarding.
	if got := h.Sysctl(t, "net/ipv6/conf/"+testutil.StandInUplink+"/accept_ra"); got != "1" {
		t.Errorf("accept_ra of the uplink is %s; it was 1", got)
	}
	if out, _ := h.Try("ufw", "show", "added"); strings.Contains(out, "tp+") {
		t.Errorf("ufw's route rule is left:\n%s", out)
	}
	if out := h.Run(t, "iptables-nft", "-S"); strings.Contains(out, "tupper") {
		t.Errorf("accepts are left in iptables:\n%s", out)
	}
	entries, _ := os.ReadDir(h.Path("/run/tupper"))
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() {
			t.Errorf("/run/tupper/%s is left", name)
		}
	}
}

// TestBridgeNeighbour checks that a bridge with br_netfilter on, as a
// Kubernetes node's CNI makes it (two pods on cni0, masqueraded out),
// keeps pod-to-pod traffic and the pods' egress while Tupper runs on the
// same host, after Tupper turned forwarding on; that Tupper's guard still
// keeps the host from routing for its uplink (a neighbour on the uplink
// cannot reach a pod through the host); that a sandbox is refused at once
// by a pod; and that the last daemon's stop leaves forwarding on, for the
// pods, and says why.
func TestBridgeNeighbour(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes on a stand-in host")
	}
	testutil.RequiresRunsc(t)
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		testutil.Skip(t, "busybox is not installed (busybox-static)")
	}
	h := testutil.NewStandInHost(t)
	d := serveOn(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	client := standInClient(t, h, d)
	sb := createSandbox(ctx, t, client, true)
	if got := h.Sysctl(t, "net/ipv4/ip_forward"); got != "1" {
		t.Fatalf("ip_forward %s after Tupper's first sandbox, want 1", got)
	}

	// The CNI bridge and two pods, made after Tupper's guard was up.
	www := filepath.Join(h.Dir, "www")
	os.MkdirAll(www, 0o755)
	os.WriteFile(filepath.Join(www, "index.html"), []byte("pod\n"), 0o644)
	h.Run(t, "sh", "-ec", `
echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables
ip link add cni0 type bridge; ip addr add 10.244.0.1/24 dev cni0; ip link set cni0 up
for p in a b; do
  ip netns add pod-$p
  ip link add veth-$p type veth peer name eth0 netns pod-$p
  ip link set veth-$p master cni0 up
  ip -n pod-$p link set lo up; ip -n pod-$p link set eth0 up
done
ip -n pod-a addr add 10.244.0.2/24 dev eth0; ip -n pod-a route add default via 10.244.0.1
ip -n pod-b addr add 10.244.0.3/24 dev eth0; ip -n pod-b route add default via 10.244.0.1
iptables-nft -t nat -A POSTROUTING -s 10.244.0.0/24 ! -o cni0 -j MASQUERADE`)
	if out := h.Sysctl(t, "net/bridge/bridge-nf-call-iptables"); out != "1" {
		t.Fatalf("bridge-nf-call-iptables is %s", out)
	}
	pod := h.Command(context.Background(), "ip", "netns", "exec", "pod-b", busybox, "httpd", "-f", "-p", "80", "-h", www)
	if err := pod.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pod.Process.Kill(); pod.Wait() })
	get := func(from, addr string) (string, error) {
		return h.Try("ip", "netns", "exec", from, "sh", "-c",
			fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | %s nc -w 3 %s 80`, busybox, addr))
	}
	waitUntil(t, 10*time.Second, "pod-b serves", func() bool {
		out, _ := h.Try("ip", "netns", "exec", "pod-b", "sh", "-c", fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | %s nc -w 1 127.0.0.1 80`, busybox))
		return strings.Contains(out, "pod")
	})
	if out, err := get("pod-a", "10.244.0.3"); err != nil || !strings.Contains(out, "pod") {
		t.Errorf("pod to pod across the bridge: %v: %s", err, out)
	}
	if out, err := get("pod-a", testutil.StandInWorld.String()); err != nil || !strings.Contains(out, "world") {
		t.Errorf("pod to the fake internet: %v: %s", err, out)
	}
	// A neighbour on the uplink that routes the pods' network through the
	// host: the host was no router before Tupper, and is none for it now.
	if out, err := h.RunInWorld("ip", "route", "add", "10.244.0.0/24", "via", h.UplinkAddr().String()); err != nil {
		t.Fatalf("route in the world: %v: %s", err, out)
	}
	if out, err := h.RunInWorld("sh", "-c", fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | %s nc -w 2 10.244.0.3 80`, busybox)); err == nil {
		t.Errorf("a neighbour on the uplink reached a pod through the host: %s", out)
	}
	expectRefused(ctx, t, sb, "http://10.244.0.3/")
	// Nor does the host route a neighbour on the uplink into a sandbox.
	sbAddr := sandboxAddr(ctx, t, sb)
	if out, err := h.RunInWorld("ip", "route", "add", "10.213.0.0/16", "via", h.UplinkAddr().String()); err != nil {
		t.Fatalf("route in the world: %v: %s", err, out)
	}
	if out, err := h.RunInWorld("sh", "-c", fmt.Sprintf(`printf 'GET /health HTTP/1.0\r\n\r\n' | %s nc -w 2 %s 49983`, busybox, sbAddr)); err == nil {
		t.Errorf("a neighbour on the uplink reached into the sandbox at %s: %s", sbAddr, out)
	}
	// A VM bridge made after the sandbox started, with addresses that no
	// always-denied range holds: the sandbox is refused it too, within
	// the few seconds Tupper takes to look at the host again.
	h.Run(t, "sh", "-ec", `
ip link add vmbr0 type bridge; ip addr add 198.51.100.129/26 dev vmbr0; ip link set vmbr0 up
ip netns add vm; ip link add veth-vm type veth peer name eth0 netns vm
ip link set veth-vm master vmbr0 up; ip -n vm link set lo up; ip -n vm link set eth0 up
ip -n vm addr add 198.51.100.130/26 dev eth0; ip -n vm route add default via 198.51.100.129`)
	vm := h.Command(context.Background(), "ip", "netns", "exec", "vm", busybox, "httpd", "-f", "-p", "80", "-h", www)
	if err := vm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Process.Kill(); vm.Wait() })
	waitUntil(t, 15*time.Second, "the sandbox is refused the VM bridge made after it", func() bool {
		return strings.Contains(sandboxCurl(ctx, t, sb, "http://198.51.100.130/"), "rc=7")
	})
	expectRefused(ctx, t, sb, "http://198.51.100.130/")
	if out := sandboxCurl(ctx, t, sb, "http://"+testutil.StandInWorld.String()+"/"); !strings.Contains(out, "world") {
		t.Errorf("sandbox to the fake internet: %s", out)
	}

	sb.Kill(ctx)
	d.stop(t)
	if got := h.Sysctl(t, "net/ipv4/ip_forward"); got != "1" {
		t.Errorf("ip_forward %s after the last daemon stopped, but the pods rely on it", got)
	}
	if !strings.Contains(d.log(), "net.ipv4.ip_forward stays on: interface cni0 (bridge) forwards for other software") {
		t.Errorf("the daemon's stop does not say why forwarding stays on:\n%s", tailLines(d.log(), 20))
	}
	if out, err := get("pod-a", "10.244.0.3"); err != nil || !strings.Contains(out, "pod") {
		t.Errorf("pod to pod after Tupper stopped: %v: %s", err, out)
	}
	if out := h.Run(t, "nft", "list", "tables"); strings.Contains(out, "inet tupper") {
		t.Errorf("the table is left:\n%s", out)
	}
}

// startFirewalld starts firewalld, with its nftables backend, on h, and a
// system bus for it; both stop when t ends.
func startFirewalld(t *testing.T, h *testutil.StandInHost) {
	t.Helper()
	h.Run(t, "mkdir", "-p", "/run/dbus")
	bus := strings.TrimSpace(h.Run(t, "dbus-daemon", "--system", "--fork", "--print-pid"))
	t.Cleanup(func() {
		if pid, err := strconv.Atoi(bus); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if out := h.Run(t, "cat", "/etc/firewalld/firewalld.conf"); !strings.Contains(out, "FirewallBackend=nftables") {
		t.Fatalf("firewalld's backend is not nftables:\n%s", out)
	}
	logf, err := os.Create(filepath.Join(h.Dir, "firewalld.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(context.Background(), "firewalld", "--nofork", "--nopid")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
	})
	waitUntil(t, time.Minute, "firewalld runs", func() bool {
		out, _ := h.Try("firewall-cmd", "--state")
		return strings.TrimSpace(out) == "running"
	})
}
