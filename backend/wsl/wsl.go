package wsl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/idlock"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/atomicfile"
	"github.com/lightbearco/tupper/internal/cleanup"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/network"
)

// Backend runs each sandbox as a WSL 2 distribution of its own. It is safe
// for concurrent use.
type Backend struct {
	cfg Config
	cli *cli
	log *slog.Logger

	locks idlock.Locks // per sandbox id, and per image key

	mu    sync.Mutex
	boxes map[string]*sandbox // every sandbox the backend holds a record of
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Dialer  = (*Backend)(nil)
	_ backend.Waiter  = (*Backend)(nil)
)

// record is what the backend keeps of a sandbox in its sandbox.json, so
// that a later process can reach, check and stop it.
type record struct {
	ID     string `json:"id"`
	Distro string `json:"distro"`
	// Ports maps the ports the sandbox was asked to serve on (the agent's
	// 49983, a code interpreter's) to the host ports they were moved to.
	Ports     map[int]int `json:"ports"`
	StartedAt time.Time   `json:"startedAt"`
	// Pid is the wsl.exe that runs the agent, for diagnostics.
	Pid int `json:"pid,omitempty"`
}

// sandbox is a sandbox as this process knows it.
type sandbox struct {
	rec record
	// cmd is the wsl.exe running the agent and done is closed when it
	// has exited; both are nil for a sandbox an earlier process started.
	// They and rec.Pid are set once the agent starts, under Backend.mu.
	cmd  *exec.Cmd
	done chan struct{}
}

// New returns a Backend. It fails when cfg is invalid or wsl.exe cannot be
// found. It picks up the records of sandboxes an earlier process started,
// so that they can be reached, checked and stopped.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.WSLPath == "" {
		p, err := FindWSL()
		if err != nil {
			return nil, err
		}
		cfg.WSLPath = p
	}
	b := &Backend{cfg: cfg, cli: &cli{path: cfg.WSLPath}, log: cfg.Logger.With("backend", "wsl"), boxes: map[string]*sandbox{}}
	for _, d := range []string{b.sandboxesDir(), b.imagesDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	entries, err := os.ReadDir(b.sandboxesDir())
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		rec, err := readRecord(filepath.Join(b.sandboxesDir(), e.Name()))
		if err != nil {
			// A half-made sandbox of a crashed Start: List reports it
			// and Stop removes it.
			continue
		}
		b.boxes[rec.ID] = &sandbox{rec: rec}
	}
	return b, nil
}

// Everything the backend makes lives under Config.Root (see the package
// doc).
func (b *Backend) sandboxesDir() string        { return filepath.Join(b.cfg.Root, "sandboxes") }
func (b *Backend) imagesDir() string           { return filepath.Join(b.cfg.Root, "images") }
func (b *Backend) sandboxDir(id string) string { return filepath.Join(b.sandboxesDir(), id) }
func (b *Backend) distroName(id string) string { return b.cfg.Prefix + id }

const recordFile = "sandbox.json"

func readRecord(dir string) (record, error) {
	var rec record
	bs, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(bs, &rec); err != nil {
		return rec, err
	}
	if rec.ID == "" || rec.Ports[backend.AgentPort] == 0 {
		return rec, fmt.Errorf("%s: incomplete record", dir)
	}
	return rec, nil
}

func (b *Backend) writeRecord(rec record) error {
	bs, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(b.sandboxDir(rec.ID), recordFile), bs, 0o600)
}

// Start imports the sandbox's distribution, starts its agent and waits for
// the agent to answer. A Start that fails at any step undoes the steps
// before it.
func (b *Backend) Start(ctx context.Context, spec *backend.Spec) (*backend.Sandbox, error) {
	if err := network.ValidateID(spec.ID); err != nil {
		return nil, err
	}
	if err := checkPolicy(spec.Network); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", spec.ID, err)
	}
	id, distro := spec.ID, b.distroName(spec.ID)
	unlock := b.locks.Lock(id)
	defer unlock()
	log := b.log.With("sandbox", id, "op", "start")

	dir := b.sandboxDir(id)
	if _, err := os.Lstat(dir); err == nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrAlreadyExists)
	}
	names, err := b.listAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if slices.Contains(names, distro) {
		return nil, fmt.Errorf("sandbox %q: distribution %s exists already (a leftover that Stop removes): %w", id, distro, errdefs.ErrAlreadyExists)
	}

	var undo cleanup.Stack
	defer func() {
		if err := undo.Run(); err != nil {
			log.Error("undo a failed start", "err", err)
		}
	}()
	// The directory is the mark of a sandbox this backend owns: made
	// first, removed last.
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	undo.Add(func() error { return removeAll(dir) })

	hostname := spec.Hostname
	if hostname == "" {
		hostname = id
	}
	unlockImage := b.locks.Lock("image " + imageKey(spec))
	tarPath, img, err := imageTar(b.imagesDir(), spec)
	unlockImage()
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	added, err := distroEntries(hostname, spec.Agent.Path)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}

	sb, err := b.reserve(id, distro, spec.Agent.Args)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	undo.Add(func() error { b.forget(id); return nil })
	if err := b.writeRecord(sb.rec); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}

	// Undo an import even when it seemed to fail: wsl.exe may have been
	// ended by ctx while the service went on registering.
	undo.Add(func() error { return b.removeDistro(distro) })
	if err := b.importDistro(ctx, distro, filepath.Join(dir, "distro"), tarPath, added); err != nil {
		return nil, fmt.Errorf("sandbox %q: import: %w", id, err)
	}
	if disk := spec.Resources.DiskBytes; disk > 0 {
		// The distribution's disk holds the image and what the sandbox
		// writes.
		if _, err := b.cli.run(ctx, nil, resizeArgs(distro, distroDiskBytes(img, disk))...); err != nil {
			log.Warn("the sandbox's disk keeps WSL's default size: this WSL cannot resize a distribution's disk (wsl --update)", "err", err)
		}
	}

	pids := spec.Resources.Pids
	if pids == 0 {
		pids = b.cfg.DefaultPids
	}
	argv, token := agentArgv(spec, sb.rec.Ports, pids)
	if err := b.launch(sb, argv, token); err != nil {
		return nil, fmt.Errorf("sandbox %q: start the agent: %w", id, err)
	}
	undo.Add(func() error { b.endChild(sb); return nil })
	b.mu.Lock()
	rec := sb.rec
	b.mu.Unlock()
	if err := b.writeRecord(rec); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := b.waitReady(ctx, sb); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	undo.Release()
	log.Info("sandbox started", "distro", distro, "agent", sb.agentAddr())
	return &backend.Sandbox{ID: id, AgentAddr: sb.agentAddr(), Pid: rec.Pid, StartedAt: rec.StartedAt}, nil
}

// checkPolicy refuses a policy that limits egress: all WSL 2 distributions
// share the VM's network, and nothing between a sandbox and the internet
// could hold it.
func checkPolicy(p *netpolicy.Policy) error {
	if p == nil || len(p.DenyOut) == 0 && len(p.Rules) == 0 {
		return nil
	}
	return fmt.Errorf("the WSL backend cannot limit a sandbox's network (WSL 2 distributions share the VM's): %w", errdefs.ErrNotSupported)
}

// reserve picks the sandbox's host ports and records it, so that no other
// Start takes them.
func (b *Backend) reserve(id, distro string, args []string) (*sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	taken := map[int]bool{}
	for _, s := range b.boxes {
		for _, p := range s.rec.Ports {
			taken[p] = true
		}
	}
	rec := record{ID: id, Distro: distro, Ports: map[int]int{}, StartedAt: time.Now().UTC()}
	want := []int{backend.AgentPort}
	if p := codeInterpreterPort(args); p != 0 {
		want = append(want, p)
	}
	for _, inside := range want {
		p, err := freePort(b.cfg.FirstPort, b.cfg.LastPort, taken)
		if err != nil {
			return nil, err
		}
		taken[p] = true
		rec.Ports[inside] = p
	}
	sb := &sandbox{rec: rec}
	b.boxes[id] = sb
	return sb, nil
}

func (b *Backend) forget(id string) {
	b.mu.Lock()
	delete(b.boxes, id)
	b.mu.Unlock()
}

func (b *Backend) lookup(id string) *sandbox {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.boxes[id]
}

// exited returns the channel closed when the wsl.exe running sb's agent
// exits, or nil when this process did not start one.
func (b *Backend) exited(sb *sandbox) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return sb.done
}

func (sb *sandbox) agentAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sb.rec.Ports[backend.AgentPort]))
}

// importDistro registers distro from the image's tar followed by the
// backend's entries, streamed to wsl.exe's stdin, so that no per-sandbox
// copy of the image is written.
func (b *Backend) importDistro(ctx context.Context, distro, dir, tarPath string, added []byte) error {
	f, err := os.Open(tarPath)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = b.cli.run(ctx, io.MultiReader(f, bytes.NewReader(added)), importArgs(distro, dir)...)
	return err
}

// agentArgv is the command wsl runs in the distribution: the launcher,
// which caps tasks at pids, then env -i with the sandbox's environment
// (WSL's own is not the sandbox's), then the agent. The agent listens on
// its host port at 127.0.0.1, as does a code interpreter it serves. The
// access token is taken out of the environment (and so off every command
// line): it is returned, for the agent to read from its stdin.
func agentArgv(spec *backend.Spec, ports map[int]int, pids int64) (argv []string, token string) {
	argv = []string{"/bin/sh", distroStart, strconv.FormatInt(pids, 10), "/usr/bin/env", "-i"}
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, tokenEnv+"="); ok {
			token = v
			continue
		}
		argv = append(argv, kv)
	}
	argv = append(argv, distroAgent)
	argv = append(argv, agentArgs(spec.Agent.Args, ports)...)
	if token != "" {
		argv = append(argv, "--access-token-fd", "0")
	}
	return argv, token
}

// tokenEnv is the variable through which the engine hands the agent its
// access token.
const tokenEnv = "TUPPER_ACCESS_TOKEN"

// agentArgs rewrites the agent's --addr and --code-interpreter to the host
// ports the sandbox got, on 127.0.0.1.
func agentArgs(args []string, ports map[int]int) []string {
	local := func(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }
	var out []string
	sawAddr := false
	for i := 0; i < len(args); i++ {
		name, value, inline := strings.Cut(args[i], "=")
		switch strings.TrimLeft(name, "-") {
		case "addr", "code-interpreter":
			if !strings.HasPrefix(name, "-") {
				break
			}
			if !inline && i+1 < len(args) {
				value = args[i+1]
				i++
			}
			inside := 0
			if strings.TrimLeft(name, "-") == "addr" {
				sawAddr, inside = true, backend.AgentPort
			} else if _, p, err := net.SplitHostPort(value); err == nil {
				inside, _ = strconv.Atoi(p)
			}
			if p, ok := ports[inside]; ok {
				value = local(p)
			}
			out = append(out, name, value)
			continue
		}
		out = append(out, args[i])
	}
	if !sawAddr {
		out = append([]string{"--addr", local(ports[backend.AgentPort])}, out...)
	}
	// The host's own connections reach the agent over the VM's loopback:
	// no cap on connections from "inside".
	return append(out, "--inside-conns", "0")
}

// codeInterpreterPort returns the port of the agent's --code-interpreter
// argument, or 0.
func codeInterpreterPort(args []string) int {
	for i, a := range args {
		name, value, inline := strings.Cut(a, "=")
		if name != "--code-interpreter" && name != "-code-interpreter" {
			continue
		}
		if !inline && i+1 < len(args) {
			value = args[i+1]
		}
		if _, p, err := net.SplitHostPort(value); err == nil {
			n, _ := strconv.Atoi(p)
			return n
		}
	}
	return 0
}

// launch starts the wsl.exe that runs argv in the sandbox's distribution;
// it lives as long as the agent does. Its output, the agent's log, goes to
// agent.log.
func (b *Backend) launch(sb *sandbox, argv []string, token string) error {
	logf, err := os.OpenFile(filepath.Join(b.sandboxDir(sb.rec.ID), "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := b.cli.command(execArgs(sb.rec.Distro, argv))
	cmd.Stdout, cmd.Stderr = logf, logf
	if token != "" {
		cmd.Stdin = strings.NewReader(token)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		logf.Close()
		b.log.Info("agent's wsl.exe exited", "sandbox", sb.rec.ID, "err", err)
		close(done)
	}()
	b.mu.Lock()
	sb.cmd, sb.done, sb.rec.Pid = cmd, done, cmd.Process.Pid
	b.mu.Unlock()
	return nil
}

// endChild kills the wsl.exe that runs sb's agent, if this process started
// one, and waits for it.
func (b *Backend) endChild(sb *sandbox) {
	b.mu.Lock()
	cmd, done := sb.cmd, sb.done
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		b.log.Warn("the agent's wsl.exe did not exit after a kill", "sandbox", sb.rec.ID, "pid", cmd.Process.Pid)
	}
}

// waitReady polls the agent's /health until it answers 204, and fails
// early, with the end of the agent's log, when its wsl.exe exits.
func (b *Backend) waitReady(ctx context.Context, sb *sandbox) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	url := "http://" + sb.agentAddr() + "/health"
	done := b.exited(sb)
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
			err = fmt.Errorf("GET /health: %s", resp.Status)
		}
		last = err
		select {
		case <-done:
			return fmt.Errorf("the agent exited before it answered: %w; its log:\n%s", errdefs.ErrUnavailable, b.logTail(sb.rec.ID))
		case <-ctx.Done():
			return fmt.Errorf("the agent at %s did not answer (last: %v): %w (is localhostForwarding off in .wslconfig?); its log:\n%s",
				sb.agentAddr(), last, errdefs.ErrDeadlineExceeded, b.logTail(sb.rec.ID))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logTail returns the end of sandbox id's agent.log.
func (b *Backend) logTail(id string) string {
	bs, _ := os.ReadFile(filepath.Join(b.sandboxDir(id), "agent.log"))
	if len(bs) > 4096 {
		bs = bs[len(bs)-4096:]
	}
	return decodeOutput(bs)
}

// State reports the state of sandbox id from WSL's list of distributions.
func (b *Backend) State(ctx context.Context, id string) (backend.State, error) {
	if err := network.ValidateID(id); err != nil {
		return "", err
	}
	sb := b.lookup(id)
	if sb == nil {
		if _, err := os.Lstat(b.sandboxDir(id)); err != nil {
			return "", fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
		}
		// A half-made sandbox of a crashed Start: nothing runs it.
		return backend.StateStopped, nil
	}
	if done := b.exited(sb); done != nil {
		select {
		case <-done:
			return backend.StateStopped, nil
		default:
		}
	}
	distro := sb.rec.Distro
	out, err := b.cli.run(ctx, nil, listVerboseArgs...)
	var entries []listEntry
	if err == nil {
		entries, err = parseListVerbose(out)
	}
	if err != nil {
		// --list --verbose fails when no distribution is registered at
		// all; the quiet list does not.
		names, qerr := b.listAll(ctx)
		if qerr == nil && !slices.Contains(names, distro) {
			return backend.StateStopped, nil
		}
		return "", fmt.Errorf("sandbox %q: %w", id, err)
	}
	for _, e := range entries {
		if e.Name != distro {
			continue
		}
		switch e.State {
		case distroRunning:
			return backend.StateRunning, nil
		case distroStopped, distroUninstalling:
			return backend.StateStopped, nil
		case distroInstalling, distroConverting, distroExporting:
			return "", fmt.Errorf("sandbox %q: distribution %s is %s: %w", id, distro, e.State, errdefs.ErrUnavailable)
		}
		// A word this backend does not know (an older, translated
		// release): ask for the running ones instead.
		out, err := b.cli.run(ctx, nil, listRunningArgs...)
		if err != nil {
			return "", fmt.Errorf("sandbox %q: %w", id, err)
		}
		if slices.Contains(parseListQuiet(out), distro) {
			return backend.StateRunning, nil
		}
		return backend.StateStopped, nil
	}
	// The distribution is gone (unregistered from outside); its record
	// is held until Stop.
	return backend.StateStopped, nil
}

// Stop ends sandbox id's agent and distribution and removes everything the
// backend made for it.
func (b *Backend) Stop(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	unlock := b.locks.Lock(id)
	defer unlock()
	distro := b.distroName(id)
	if sb := b.lookup(id); sb != nil {
		distro = sb.rec.Distro
	}
	names, err := b.listAll(ctx)
	if err != nil {
		return fmt.Errorf("sandbox %q: stop: %w", id, err)
	}
	if slices.Contains(names, distro) {
		// Terminate ends the agent, and with it the wsl.exe running it.
		if _, err := b.cli.run(ctx, nil, terminateArgs(distro)...); err != nil {
			b.log.Warn("terminate", "sandbox", id, "err", err)
		}
	}
	if sb := b.lookup(id); sb != nil {
		b.endChild(sb)
	}
	if slices.Contains(names, distro) {
		if err := b.unregister(ctx, distro); err != nil {
			return fmt.Errorf("sandbox %q: stop: %w", id, err)
		}
	}
	if err := removeAll(b.sandboxDir(id)); err != nil {
		return fmt.Errorf("sandbox %q: stop: %w", id, err)
	}
	b.forget(id)
	return nil
}

// unregister removes distro, and succeeds when it is gone afterwards
// whatever wsl said (another Stop may have removed it meanwhile).
func (b *Backend) unregister(ctx context.Context, distro string) error {
	_, err := b.cli.run(ctx, nil, unregisterArgs(distro)...)
	if err == nil {
		return nil
	}
	if names, lerr := b.listAll(ctx); lerr == nil && !slices.Contains(names, distro) {
		return nil
	}
	return err
}

// removeDistro terminates and unregisters distro if it is registered. It
// undoes a failed Start, so it runs on a context of its own.
func (b *Backend) removeDistro(distro string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names, err := b.listAll(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(names, distro) {
		return nil
	}
	if _, err := b.cli.run(ctx, nil, terminateArgs(distro)...); err != nil {
		b.log.Warn("terminate", "distro", distro, "err", err)
	}
	return b.unregister(ctx, distro)
}

// listAll returns the names of every registered distribution, including
// those being installed or removed.
func (b *Backend) listAll(ctx context.Context) ([]string, error) {
	out, err := b.cli.run(ctx, nil, listAllArgs...)
	if err != nil {
		return nil, err
	}
	return parseListQuiet(out), nil
}

// List returns the ids of the backend's sandboxes: every distribution that
// has the backend's prefix and every sandbox directory, running or not.
func (b *Backend) List(ctx context.Context) ([]string, error) {
	names, err := b.listAll(ctx)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, n := range names {
		if id, ok := strings.CutPrefix(n, b.cfg.Prefix); ok && network.ValidateID(id) == nil {
			ids[id] = true
		}
	}
	entries, err := os.ReadDir(b.sandboxesDir())
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if network.ValidateID(e.Name()) == nil {
			ids[e.Name()] = true
		}
	}
	return sortedKeys(ids), nil
}

// Wait blocks until sandbox id's agent has exited: the wsl.exe that runs
// it, when this process started it, else the distribution's state, polled
// every second.
func (b *Backend) Wait(ctx context.Context, id string) error {
	sb := b.lookup(id)
	if sb == nil {
		return fmt.Errorf("sandbox %q: wait: %w", id, errdefs.ErrNotFound)
	}
	if done := b.exited(sb); done != nil {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		st, err := b.State(ctx, id)
		if errdefs.IsNotFound(err) || err == nil && st != backend.StateRunning {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// DialSandbox connects to port inside sandbox id. The agent's port and a
// code interpreter's were moved to host ports of the sandbox's own; any
// other port is dialed as it is at 127.0.0.1, where WSL forwards whatever
// listens on it in the shared VM, whichever sandbox (or distribution of
// the user's) that is. See the package doc.
func (b *Backend) DialSandbox(ctx context.Context, id string, port int) (net.Conn, error) {
	sb := b.lookup(id)
	if sb == nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if p, ok := sb.rec.Ports[port]; ok {
		port = p
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// removeAll removes dir, trying for a while: on Windows a file a process
// still holds (a wsl.exe that is ending) cannot be removed yet.
func removeAll(dir string) error {
	var err error
	for range 50 {
		if err = os.RemoveAll(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}
