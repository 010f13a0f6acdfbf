package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lightbearco/tupper/backend"
	_ "github.com/lightbearco/tupper/backend/runc"
	"github.com/lightbearco/tupper/errdefs"
)

// envStdin carries what fakewsl read on its stdin to its init inside the
// sandbox, which hands it to CMD as CMD's stdin.
const envStdin = "TUPPER_FAKEWSL_STDIN"

// openVM opens the runc backend that runs the distributions: one root for
// all of them, as one VM runs all of WSL's. Each fakewsl process opens it
// for the one distribution it works on; --terminate waits for the --exec
// of a distribution to end before it touches that distribution's sandbox.
func openVM() (backend.Backend, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return backend.Open("runc", backend.Config{Root: vmDir(), Logger: log, Network: backend.NetworkConfig{NoEgress: true}})
}

func closeVM(b backend.Backend) {
	if c, ok := b.(io.Closer); ok {
		c.Close()
	}
}

// sandboxID is the runc sandbox of distribution name: ids there are at
// most 40 of [a-z0-9-], names are not.
func sandboxID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "wsl-" + hex.EncodeToString(sum[:8])
}

// cmdExec implements -d NAME -u root --cd / --exec CMD [ARG...].
func cmdExec(args []string) int {
	var name, user, cwd string
	var argv []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--exec" || a == "-e" {
			argv = args[i+1:]
			break
		}
		if i+1 >= len(args) {
			return fail(msgInvalidUsage, a)
		}
		switch a {
		case "-d", "--distribution":
			name = args[i+1]
		case "-u", "--user":
			user = args[i+1]
		case "--cd":
			cwd = args[i+1]
		default:
			return fail(msgInvalidUsage, a)
		}
		i++
	}
	if len(argv) == 0 {
		return fail("fakewsl: only --exec CMD is supported, not a shell")
	}
	if user != "root" {
		return fail("fakewsl: only -u root is supported")
	}
	if cwd == "" {
		cwd = "/"
	}
	d, ok := loadDistro(name)
	if !ok {
		return fail(msgNotFound)
	}
	dir := distroDir(name)
	if alive(readPid(filepath.Join(dir, "exec.pid"))) {
		return fail("fakewsl: %s already runs a command; the stand-in runs one at a time", name)
	}
	if failing("exec") {
		return fail("fakewsl: injected failure: %s does not start", argv[0])
	}
	// What wsl.exe relays to CMD's stdin, read whole.
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fail("fakewsl: stdin: %v", err)
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	pidFile := filepath.Join(dir, "exec.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return fail("fakewsl: %v", err)
	}
	defer os.Remove(pidFile)

	vm, err := openVM()
	if err != nil {
		return fail("fakewsl: %v", err)
	}
	defer closeVM(vm)
	id := sandboxID(name)
	rootfs := filepath.Join(dir, "rootfs")
	spec := &backend.Spec{
		ID:       id,
		RootFS:   rootfs,
		Hostname: wslConfValue(filepath.Join(rootfs, "etc", "wsl.conf"), "network", "hostname"),
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			envStdin + "=" + base64.StdEncoding.EncodeToString(stdin),
		},
		Agent:  backend.Agent{Path: self(), Args: append([]string{initFlag, cwd}, argv...)},
		Labels: map[string]string{"fakewsl-distro": name},
	}
	if d.DiskBytes > 0 {
		// The disk's free space: its size less what the files take.
		spec.Resources.DiskBytes = max(d.DiskBytes-usedBytes(rootfs), 16<<20)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	sb, err := vm.Start(ctx, spec)
	cancel()
	if err != nil {
		return fail("fakewsl: start %s: %v", name, err)
	}
	initPid := filepath.Join(dir, "init.pid")
	os.WriteFile(initPid, []byte(strconv.Itoa(sb.Pid)), 0o600)
	stopRelay := relayConsole(id)
	defer func() {
		stopRelay()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := vm.Stop(ctx, id); err != nil {
			fmt.Fprintf(os.Stderr, "fakewsl: stop %s: %v\n", name, err)
		}
		os.Remove(initPid)
	}()

	var fwd *forwarder
	if !failing("silent") {
		fwd = startForwarder(sb.Pid)
		defer fwd.close()
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if w, ok := vm.(backend.Waiter); ok {
			w.Wait(context.Background(), id)
			return
		}
		for {
			if st, err := vm.State(context.Background(), id); err != nil || st != backend.StateRunning {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	select {
	case <-ended:
		fmt.Fprintf(os.Stderr, "fakewsl: %s: %s ended\n", name, argv[0])
		return 1
	case sig := <-sigc:
		fmt.Fprintf(os.Stderr, "fakewsl: %s: %s, stopping\n", name, sig)
		return 0
	}
}

// stopSandbox stops the runc sandbox of distribution name if one is left,
// as after an --exec that was killed.
func stopSandbox(name string) error {
	if _, err := os.Stat(vmDir()); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	vm, err := openVM()
	if err != nil {
		return err
	}
	defer closeVM(vm)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := vm.Stop(ctx, sandboxID(name)); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	os.Remove(filepath.Join(distroDir(name), "init.pid"))
	return nil
}

// self is this program's path, which the runc backend mounts in the
// sandbox as its first process.
func self() string {
	p, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return p
}

// wslConfValue reads key of section from a wsl.conf; "" when unset.
func wslConfValue(path, section, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	in := ""
	s := bufio.NewScanner(f)
	for s.Scan() {
		l := strings.TrimSpace(s.Text())
		if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") {
			in = strings.TrimSpace(l[1 : len(l)-1])
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if ok && strings.EqualFold(in, section) && strings.EqualFold(strings.TrimSpace(k), key) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// usedBytes is what the files under root take on disk.
func usedBytes(root string) int64 {
	var n int64
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}
