//go:build linux

// Command fakefirecracker stands in for Firecracker in the tests of
// backend/firecracker, on hosts where no firecracker binary can be had. It
// serves the parts of Firecracker's REST API the backend uses, on the API
// socket, as Firecracker does (PUT /machine-config, /boot-source,
// /drives/{id}, /vsock, /actions, /snapshot/create, /snapshot/load;
// PATCH /vm; GET /), refusing configuration after the start, and a
// snapshot load after any configuration, as Firecracker does; and on
// InstanceStart it runs the guest for real, in a runc sandbox rather than
// a microVM:
//
//   - the initramfs is read as the kernel would (a newc cpio): its /init
//     is the agent, and every module /modules/order names must be in it;
//   - the drives are told apart by their ext4 labels, as the guest's init
//     does; the image disk is loop-mounted read-only and becomes the runc
//     sandbox's root; the boot configuration is read from the writable
//     disk and removed, as the init does;
//   - the runc backend (opened as a library, with no egress) runs the
//     agent with the boot configuration's environment, arguments and task
//     limit, the machine config's vCPUs and memory, and the writable
//     disk's size as its disk cap;
//   - the vsock socket answers Firecracker's handshake ("CONNECT <port>\n",
//     "OK <port>\n"): the agent's vsock port reaches the agent's TCP port,
//     and its forwarding port answers the agent's forwarding protocol,
//     dialling the sandbox's address (the real agent dials the guest's
//     loopback); other ports are closed unanswered, as Firecracker does
//     when nothing in the guest listens.
//
// Its snapshots are no memory snapshots: it cannot save a runc sandbox's
// memory, so a snapshot keeps the guest's runc sandbox frozen and records
// the VM's configuration and files, and a load in a new stand-in takes
// the frozen sandbox over and thaws it — enough for the backend's
// checkpoint and restore to run end to end. snapshot.go says how, and
// where that differs from Firecracker.
//
// When the agent ends, the stand-in exits, as Firecracker does when its
// guest stops. A watchdog process it starts first removes the runc
// sandbox and the mounts once the stand-in is gone however it ended, even
// by SIGKILL, unless a snapshot holds them: a microVM's guest vanishes
// with its VMM.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lightbearco/tupper/backend"
	_ "github.com/lightbearco/tupper/backend/runc"
)

// workBase holds each stand-in's work directory: the guest's mounts and
// the runc backend's root.
const workBase = "/run/tupper-fakefc"

func main() {
	var err error
	switch {
	case len(os.Args) > 2 && os.Args[1] == "watchdog":
		err = watchdog(os.Args[2])
	case filepath.Base(os.Args[0]) == "jailer":
		err = jailer(os.Args[1:])
	default:
		err = run()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakefirecracker (%s): %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("firecracker", flag.ContinueOnError)
	apiSock := fs.String("api-sock", "/run/firecracker.socket", "API socket")
	id := fs.String("id", "anonymous-instance", "microVM id")
	version := fs.Bool("version", false, "print the version")
	// What the jailer passes on.
	fs.Int64("start-time-us", 0, "")
	fs.Int64("start-time-cpu-us", 0, "")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	*apiSock = inChroot(*apiSock)
	if *version {
		fmt.Println("Firecracker v" + standInVersion + " (tupper's fakefirecracker)")
		return nil
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("vmm", "fakefirecracker", "id", *id)
	ln, err := net.Listen("unix", *apiSock)
	if err != nil {
		return err
	}
	vm := &vmm{id: *id, log: log, exit: make(chan error, 1), drives: map[string]driveConfig{}}
	srv := &http.Server{Handler: vm}
	go srv.Serve(ln)
	log.Info("API serving", "sock", *apiSock)

	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-sigc:
		log.Info("exiting", "signal", sig.String())
		return nil
	case err := <-vm.exit:
		log.Info("the guest ended", "err", err)
		// The answers under way go out first: a failed snapshot load
		// ends the process, as Firecracker's does, after its fault.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		return nil
	}
}

// startWatchdog starts this binary again as the watchdog of work, holding
// the read end of a pipe whose write end only this process has: it reads
// EOF when this process is gone.
func startWatchdog(work string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// The watchdog's command line must not name the sandbox: a test's
	// crash kills every process that does.
	cmd := exec.Command(exe, "watchdog", work)
	cmd.Stdin = r
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Not in this process's group: a signal to the VMM is not for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	r.Close()
	// w stays open, unreferenced, for this process's life (no CLOEXEC
	// matters: nothing else is executed).
	watchdogPipe = w
	go cmd.Wait()
	return nil
}

// watchdogPipe holds the write end of the watchdog's pipe for the life of
// this process: a file only written to would be closed by its finalizer,
// and the watchdog would clean up under a live VMM.
//
//lint:ignore U1000 written once to keep the file referenced, never read
var watchdogPipe *os.File

// watchdog waits for its stand-in to end, then removes the runc sandbox,
// the mounts and the work directory, unless the stand-in handed them to a
// snapshot: then it waits, outside the VMM's cgroup, for a stand-in that
// loads the snapshot to take them over, and removes them when none has
// within the snapshot's time to live (see snapshot.go).
func watchdog(work string) error {
	vmmPid := os.Getppid()
	io.Copy(io.Discard, os.Stdin)
	gone := time.Now()
	left := false
	for {
		unlock, err := lockWork(work)
		if err != nil {
			return nil // the work directory is gone: nothing to do
		}
		owner, _ := readOwner(work)
		if owner.Pid != vmmPid {
			unlock() // a stand-in that loaded the snapshot has it now
			return nil
		}
		if _, handed := readHandoff(work); !handed || time.Since(gone) > snapshotTTL() {
			err := cleanWork(work)
			unlock()
			return err
		}
		unlock()
		if !left {
			// The VMM's cgroup must empty for its Stop to finish.
			leaveCgroups()
			left = true
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cleanWork removes the runc sandbox, the mounts and the work directory.
func cleanWork(work string) error {
	b, err := os.ReadFile(filepath.Join(work, "id"))
	if err != nil {
		return err
	}
	id := string(b)
	var errs []error
	if _, err := os.Stat(filepath.Join(work, "runc")); err == nil {
		rb, err := backend.Open("runc", backend.Config{Root: filepath.Join(work, "runc"), Network: backend.NetworkConfig{NoEgress: true}, Logger: quietLogger()})
		if err != nil {
			errs = append(errs, err)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			if err := rb.Stop(ctx, id); err != nil {
				errs = append(errs, err)
			}
			cancel()
			if c, ok := rb.(io.Closer); ok {
				c.Close()
			}
		}
	}
	for _, m := range []string{"base", "rw"} {
		if err := unmount(filepath.Join(work, m)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(work)
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// The API's request bodies, as Firecracker's swagger names their fields.
type (
	machineConfig struct {
		VCPUCount  int   `json:"vcpu_count"`
		MemSizeMiB int64 `json:"mem_size_mib"`
		SMT        bool  `json:"smt"`
	}
	bootSource struct {
		KernelImagePath string `json:"kernel_image_path"`
		InitrdPath      string `json:"initrd_path"`
		BootArgs        string `json:"boot_args"`
	}
	driveConfig struct {
		DriveID      string `json:"drive_id"`
		PathOnHost   string `json:"path_on_host"`
		IsRootDevice bool   `json:"is_root_device"`
		IsReadOnly   bool   `json:"is_read_only"`
	}
	vsockConfig struct {
		GuestCID uint32 `json:"guest_cid"`
		UDSPath  string `json:"uds_path"`
	}
	action struct {
		ActionType string `json:"action_type"`
	}
	vmState struct {
		State string `json:"state"`
	}
)

// vmm is the stand-in's state: the configuration the API gave it, and the
// guest once started.
type vmm struct {
	id, work string
	log      *slog.Logger
	exit     chan error

	mu      sync.Mutex
	machine *machineConfig
	boot    *bootSource
	drives  map[string]driveConfig
	order   []string // drive ids in the order they were added
	vsock   *vsockConfig
	state   string // "Not started", "Running" or "Paused"
	guest   *guest
}

// Test hooks, from the environment the backend passes on: RecordEnv
// names a file to which every API request is appended as a JSON line
// (method, path, body); FailEnv names one call ("PUT /vsock") that is
// answered with a fault.
const (
	recordEnv = "TUPPER_FAKEFC_RECORD"
	failEnv   = "TUPPER_FAKEFC_FAIL"
)

func (v *vmm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v.mu.Lock()
	defer v.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if path := os.Getenv(recordEnv); path != "" {
		line, _ := json.Marshal(map[string]string{"method": r.Method, "path": r.URL.Path, "body": string(body)})
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			f.Write(append(line, '\n'))
			f.Close()
		}
	}
	if os.Getenv(failEnv) == r.Method+" "+r.URL.Path {
		fault(w, http.StatusBadRequest, "injected failure of "+r.Method+" "+r.URL.Path)
		return
	}
	if v.state == "" {
		v.state = "Not started"
	}
	started := v.state != "Not started"
	decode := func(into any) bool {
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			fault(w, http.StatusBadRequest, "An error occurred when deserializing the json body of a request: "+err.Error())
			return false
		}
		return true
	}
	preBoot := func() bool {
		if started {
			fault(w, http.StatusBadRequest, "The requested operation is not supported after starting the microVM.")
			return false
		}
		return true
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/":
		json.NewEncoder(w).Encode(map[string]string{"id": v.id, "state": v.state, "vmm_version": standInVersion, "app_name": "Firecracker"})
	case r.Method == http.MethodPut && r.URL.Path == "/machine-config":
		var mc machineConfig
		if !preBoot() || !decode(&mc) {
			return
		}
		if mc.VCPUCount < 1 || mc.VCPUCount > 32 || mc.MemSizeMiB < 1 {
			fault(w, http.StatusBadRequest, "The vCPU number is invalid! The vCPU number can only be 1 or an even number when SMT is enabled.")
			return
		}
		v.machine = &mc
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut && r.URL.Path == "/boot-source":
		var bs bootSource
		if !preBoot() || !decode(&bs) {
			return
		}
		bs.KernelImagePath, bs.InitrdPath = inChroot(bs.KernelImagePath), inChroot(bs.InitrdPath)
		if _, err := os.Stat(bs.KernelImagePath); err != nil {
			fault(w, http.StatusBadRequest, "The kernel file cannot be opened: "+err.Error())
			return
		}
		v.boot = &bs
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/drives/"):
		var d driveConfig
		if !preBoot() || !decode(&d) {
			return
		}
		if d.DriveID != strings.TrimPrefix(r.URL.Path, "/drives/") {
			fault(w, http.StatusBadRequest, "The id from the path does not match the id from the body!")
			return
		}
		// Kept as given: a snapshot names the drives so.
		if _, err := os.Stat(inChroot(d.PathOnHost)); err != nil {
			fault(w, http.StatusBadRequest, "Unable to create the block device: "+err.Error())
			return
		}
		if _, ok := v.drives[d.DriveID]; !ok {
			v.order = append(v.order, d.DriveID)
		}
		v.drives[d.DriveID] = d
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut && r.URL.Path == "/vsock":
		var vc vsockConfig
		if !preBoot() || !decode(&vc) {
			return
		}
		if vc.GuestCID < 3 {
			fault(w, http.StatusBadRequest, "Invalid guest CID")
			return
		}
		v.vsock = &vc // as given, as the drives
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut && r.URL.Path == "/actions":
		var a action
		if !decode(&a) {
			return
		}
		if a.ActionType != "InstanceStart" {
			fault(w, http.StatusBadRequest, "The stand-in knows only InstanceStart")
			return
		}
		if !preBoot() {
			return
		}
		g, err := v.start()
		if err != nil {
			v.log.Error("start failed", "err", err)
			fault(w, http.StatusBadRequest, "Start microvm error: "+err.Error())
			return
		}
		v.guest, v.state = g, "Running"
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPatch && r.URL.Path == "/vm":
		var s vmState
		if !decode(&s) {
			return
		}
		if !started {
			fault(w, http.StatusBadRequest, "The requested operation is not supported before starting the microVM.")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
		defer cancel()
		p, ok := v.guest.runc.(backend.Pauser)
		if !ok {
			fault(w, http.StatusBadRequest, "the runc backend cannot pause")
			return
		}
		var err error
		switch s.State {
		case "Paused":
			err = p.Pause(ctx, v.guest.runcID)
		case "Resumed":
			err = p.Resume(ctx, v.guest.runcID)
			s.State = "Running"
			if err == nil && v.state == "Paused" {
				// The guest runs on: a snapshot of it, which only
				// holds it frozen, is no longer what it was.
				err = giveUpHandoff(v.work)
			}
		default:
			fault(w, http.StatusBadRequest, "unknown state "+s.State)
			return
		}
		if err != nil {
			fault(w, http.StatusBadRequest, err.Error())
			return
		}
		v.state = s.State
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut && r.URL.Path == "/snapshot/create":
		var p snapshotCreateParams
		if !decode(&p) {
			return
		}
		if v.state != "Paused" {
			fault(w, http.StatusBadRequest, "Create snapshot error: the microVM must be paused first (it is "+v.state+")")
			return
		}
		if err := v.createSnapshot(p); err != nil {
			fault(w, http.StatusBadRequest, "Create snapshot error: "+err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut && r.URL.Path == "/snapshot/load":
		var p snapshotLoadParams
		if !decode(&p) {
			return
		}
		if started || v.machine != nil || v.boot != nil || len(v.drives) > 0 || v.vsock != nil {
			fault(w, http.StatusBadRequest, "Loading a microVM snapshot not allowed after configuring boot-specific resources.")
			return
		}
		g, err := v.loadSnapshot(p)
		if err != nil {
			// Firecracker ends a process whose load failed.
			v.log.Error("snapshot load failed", "err", err)
			fault(w, http.StatusBadRequest, "Load snapshot error: "+err.Error())
			select {
			case v.exit <- err: // run answers this first
			default:
			}
			return
		}
		v.guest, v.state = g, "Paused"
		if p.ResumeVM {
			v.state = "Running"
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		fault(w, http.StatusBadRequest, "Invalid request method and/or path: "+r.Method+" "+r.URL.Path)
	}
}

func fault(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"fault_message": msg})
}

// guest is the running stand-in guest.
type guest struct {
	runc      backend.Backend
	runcID    string // the runc sandbox's id: the id of the VMM that booted it
	addr      string // the sandbox's address
	agentPort uint32 // the agent's vsock port
	fwdPort   uint32 // the agent's forwarding vsock port
	vsockLn   net.Listener

	mu    sync.Mutex
	conns map[net.Conn]bool // the vsock connections open
}

// bootConfiguration is the boot configuration on the writable disk; the
// stand-in's own reading of it, as the guest's init reads it.
type bootConfiguration struct {
	Hostname string   `json:"hostname"`
	Env      []string `json:"env"`
	Args     []string `json:"args"`
	Pids     int64    `json:"pids"`
}

// start boots the guest: see the package doc.
func (v *vmm) start() (*guest, error) {
	if v.boot == nil {
		return nil, errors.New("no boot source")
	}
	if v.vsock == nil {
		return nil, errors.New("the stand-in needs a vsock device")
	}
	mc := machineConfig{VCPUCount: 1, MemSizeMiB: 128}
	if v.machine != nil {
		mc = *v.machine
	}
	// The work directory and its watchdog come with the guest: by now
	// the backend has put this process in the VMM's cgroup, and the
	// watchdog is born there too, so that the backend's Stop waits for
	// its cleanup as it waits for the VMM's.
	if err := os.MkdirAll(workBase, 0o700); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(workBase, "vm-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(work, "id"), []byte(v.id), 0o600); err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	if err := setOwner(work, v.id); err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	if err := startWatchdog(work); err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	v.work = work
	agent := filepath.Join(v.work, "agent")
	if err := extractInit(v.boot.InitrdPath, agent); err != nil {
		return nil, fmt.Errorf("initramfs: %w", err)
	}
	if !strings.Contains(" "+v.boot.BootArgs+" ", " rdinit=/init ") {
		return nil, fmt.Errorf("boot args %q do not run /init of the initramfs", v.boot.BootArgs)
	}
	var base, rw *driveConfig
	for _, id := range v.order {
		d := v.drives[id]
		d.PathOnHost = inChroot(d.PathOnHost)
		switch label(d.PathOnHost) {
		case "tupper-base":
			if !d.IsReadOnly {
				return nil, fmt.Errorf("drive %s: the image disk is not read-only", id)
			}
			base = &d
		case "tupper-rw":
			rw = &d
		}
	}
	if base == nil || rw == nil {
		return nil, fmt.Errorf("no drives labelled tupper-base and tupper-rw among %v", v.order)
	}
	baseDir, rwDir := filepath.Join(v.work, "base"), filepath.Join(v.work, "rw")
	if err := loopMount(base.PathOnHost, baseDir, "ro"); err != nil {
		return nil, err
	}
	if err := loopMount(rw.PathOnHost, rwDir, "rw"); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(rwDir, "tupper-boot.json")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("boot configuration: %w", err)
	}
	var bc bootConfiguration
	if err := json.Unmarshal(b, &bc); err != nil {
		return nil, fmt.Errorf("boot configuration: %w", err)
	}
	if err := os.Remove(cfgPath); err != nil {
		return nil, err
	}
	for _, d := range []string{"upper", "work"} {
		if fi, err := os.Stat(filepath.Join(rwDir, d)); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("the writable disk has no %s/ for the overlay", d)
		}
	}
	if err := unmount(rwDir); err != nil {
		return nil, err
	}
	fi, err := os.Stat(rw.PathOnHost)
	if err != nil {
		return nil, err
	}
	args, agentPort, fwdPort, err := vsockArgs(bc.Args)
	if err != nil {
		return nil, err
	}

	rb, err := backend.Open("runc", backend.Config{Root: filepath.Join(v.work, "runc"), Network: backend.NetworkConfig{NoEgress: true}, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := rb.Start(ctx, &backend.Spec{
		ID:       v.id,
		RootFS:   baseDir,
		Env:      bc.Env,
		Hostname: bc.Hostname,
		Agent:    backend.Agent{Path: agent, Args: args},
		Resources: backend.Resources{
			CPUs:        float64(mc.VCPUCount),
			MemoryBytes: mc.MemSizeMiB << 20,
			Pids:        bc.Pids,
			DiskBytes:   fi.Size(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("runc: %w", err)
	}
	host, _, err := net.SplitHostPort(sb.AgentAddr)
	if err != nil {
		return nil, err
	}
	vln, err := net.Listen("unix", inChroot(v.vsock.UDSPath))
	if err != nil {
		return nil, fmt.Errorf("vsock: %w", err)
	}
	g := &guest{runc: rb, runcID: v.id, addr: host, agentPort: agentPort, fwdPort: fwdPort, vsockLn: vln, conns: map[net.Conn]bool{}}
	go g.serveVsock(v.log)
	if w, ok := rb.(backend.Waiter); ok {
		go func() {
			err := w.Wait(context.Background(), g.runcID)
			v.exit <- err
		}()
	}
	v.log.Info("guest started", "addr", host, "vcpus", mc.VCPUCount, "memMiB", mc.MemSizeMiB)
	return g, nil
}

// vsockArgs takes the vsock flags out of the agent's arguments (a runc
// sandbox shares the host's vsock, so the agent must not bind it) and
// returns the ports they named.
func vsockArgs(args []string) (rest []string, agent, fwd uint32, err error) {
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--vsock-port", "--vsock-forward-port":
			if i+1 == len(args) {
				return nil, 0, 0, fmt.Errorf("%s without a value", args[i])
			}
			n, err := strconv.ParseUint(args[i+1], 10, 32)
			if err != nil {
				return nil, 0, 0, fmt.Errorf("%s %q: %w", args[i], args[i+1], err)
			}
			if args[i] == "--vsock-port" {
				agent = uint32(n)
			} else {
				fwd = uint32(n)
			}
			i++
		default:
			rest = append(rest, args[i])
		}
	}
	if agent == 0 {
		return nil, 0, 0, errors.New("the agent's arguments name no --vsock-port")
	}
	return rest, agent, fwd, nil
}

// serveVsock answers Firecracker's host-side vsock handshake.
func (g *guest) serveVsock(log *slog.Logger) {
	for {
		c, err := g.vsockLn.Accept()
		if err != nil {
			return
		}
		go g.vsockConn(c, log)
	}
}

func (g *guest) vsockConn(c net.Conn, log *slog.Logger) {
	g.mu.Lock()
	g.conns[c] = true
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	p, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "CONNECT ")
	port, perr := strconv.ParseUint(p, 10, 32)
	if !ok || perr != nil {
		return // Firecracker drops a malformed handshake
	}
	switch uint32(port) {
	case g.agentPort:
		up, err := net.Dial("tcp", net.JoinHostPort(g.addr, strconv.Itoa(49983)))
		if err != nil {
			return // nothing listens: closed unanswered
		}
		defer up.Close()
		fmt.Fprintf(c, "OK %d\n", 1073741824+port)
		relay(c, r, up)
	case g.fwdPort:
		if g.fwdPort == 0 {
			return
		}
		fmt.Fprintf(c, "OK %d\n", 1073741824+port)
		// The agent's forwarding protocol, answered here: the real
		// agent dials the guest's loopback, the stand-in the sandbox's
		// address.
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		tp, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "CONNECT ")
		n, err := strconv.Atoi(tp)
		if !ok || err != nil || n < 1 || n > 65535 {
			fmt.Fprintf(c, "ERR malformed request %q\n", line)
			return
		}
		up, err := net.Dial("tcp", net.JoinHostPort(g.addr, strconv.Itoa(n)))
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				fmt.Fprintf(c, "ERR refused\n")
			} else {
				fmt.Fprintf(c, "ERR %s\n", err)
			}
			return
		}
		defer up.Close()
		io.WriteString(c, "OK\n")
		relay(c, r, up)
	}
}

// relay copies between the vsock connection (read through r, which may
// hold bytes already) and up, until both directions end.
func relay(c net.Conn, r *bufio.Reader, up net.Conn) {
	done := make(chan struct{})
	go func() {
		io.Copy(up, r)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		close(done)
	}()
	io.Copy(c, up)
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	<-done
}

// extractInit writes the initramfs's /init to dst and checks that every
// module /modules/order names is in the archive.
func extractInit(initrd, dst string) error {
	f, err := os.Open(initrd)
	if err != nil {
		return err
	}
	defer f.Close()
	files := map[string][]byte{}
	kinds := map[string]uint32{}
	r := bufio.NewReader(f)
	var off int64
	skip := func(n int64) error {
		_, err := io.CopyN(io.Discard, r, n)
		off += n
		return err
	}
	for {
		hdr := make([]byte, 110)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return fmt.Errorf("header at %d: %w", off, err)
		}
		off += 110
		if string(hdr[:6]) != "070701" {
			return fmt.Errorf("no newc magic at %d: %q", off-110, hdr[:6])
		}
		field := func(i int) int64 {
			n, _ := strconv.ParseUint(string(hdr[6+8*i:14+8*i]), 16, 32)
			return int64(n)
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := make([]byte, namesize)
		if _, err := io.ReadFull(r, name); err != nil {
			return err
		}
		off += namesize
		if err := skip((4 - off%4) % 4); err != nil {
			return err
		}
		n := string(bytes.TrimRight(name, "\x00"))
		if n == "TRAILER!!!" {
			break
		}
		kinds[n] = uint32(mode)
		data := make([]byte, size)
		if _, err := io.ReadFull(r, data); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		off += size
		if err := skip((4 - off%4) % 4); err != nil {
			return err
		}
		if n == "init" || strings.HasPrefix(n, "modules/") {
			files[n] = data
		}
	}
	if kinds["dev/console"]&0o170000 != 0o020000 {
		return errors.New("no /dev/console character device")
	}
	init, ok := files["init"]
	if !ok || kinds["init"]&0o111 == 0 {
		return errors.New("no executable /init")
	}
	for _, m := range strings.Fields(string(files["modules/order"])) {
		if _, ok := files["modules/"+m]; !ok {
			return fmt.Errorf("modules/order names %s, which is not in the archive", m)
		}
	}
	return os.WriteFile(dst, init, 0o755)
}

// label returns the ext4 volume label of the file system in the file at
// path.
func label(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil || binary.LittleEndian.Uint16(sb[0x38:]) != 0xEF53 {
		return ""
	}
	l, _, _ := bytes.Cut(sb[0x78:0x88], []byte{0})
	return string(l)
}

// loopMount mounts the ext4 file system in file at dir through a loop
// device of its own (mount -o loop would share one with another stand-in
// that mounts the same image), which unmount detaches.
func loopMount(file, dir, mode string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := []string{"--find", "--show"}
	if mode == "ro" {
		args = append(args, "--read-only")
	}
	var stderr strings.Builder
	losetup := exec.Command("losetup", append(args, file)...)
	losetup.Stderr = &stderr
	out, err := losetup.Output()
	if err != nil {
		return fmt.Errorf("losetup %s: %w: %s", file, err, stderr.String())
	}
	dev := strings.TrimSpace(string(out))
	if out, err := exec.Command("mount", "-t", "ext4", "-o", mode, dev, dir).CombinedOutput(); err != nil {
		exec.Command("losetup", "-d", dev).Run()
		return fmt.Errorf("mount %s (%s): %w: %s", file, dev, err, out)
	}
	return nil
}

// unmount unmounts dir if something is mounted there, detaches the loop
// device under it and waits for it to let go of its file, as a VMM's exit
// lets go of its disks.
func unmount(dir string) error {
	loop := loopOf(dir)
	err := syscall.Unmount(dir, 0)
	if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	if loop == "" {
		return nil
	}
	// Detaching a device still held (a file system going away a moment
	// after its last mount) frees it when it is let go; wait for that.
	backing := filepath.Join("/sys/block", loop, "loop", "backing_file")
	if out, err := exec.Command("losetup", "-d", "/dev/"+loop).CombinedOutput(); err != nil {
		if _, serr := os.Stat(backing); serr == nil {
			return fmt.Errorf("detach %s: %w: %s", loop, err, out)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(backing); err != nil {
			return nil
		}
	}
	return fmt.Errorf("%s still holds its file 10s after it was detached", loop)
}

// loopOf returns the loop device ("loop3") mounted at dir, if any.
func loopOf(dir string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && len(f) > i+2 && len(f) > 4 && f[4] == dir && strings.HasPrefix(f[i+2], "/dev/loop") {
				return strings.TrimPrefix(f[i+2], "/dev/")
			}
		}
	}
	return ""
}
