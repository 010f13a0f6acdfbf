package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// distro is what fakewsl keeps of a registered distribution.
type distro struct {
	Name     string `json:"name"`
	BasePath string `json:"basePath"`
	Version  int    `json:"version"`
	// DiskBytes is the disk size --manage --resize set; 0 is WSL's
	// default (1 TB).
	DiskBytes int64 `json:"diskBytes,omitempty"`
}

// namePattern is what WSL accepts as a distribution name.
var namePattern = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,64}$`)

func stateDir() string             { return os.Getenv(envState) }
func distrosDir() string           { return filepath.Join(stateDir(), "distros") }
func distroDir(name string) string { return filepath.Join(distrosDir(), name) }
func vmDir() string                { return filepath.Join(stateDir(), "vm") }

// loadDistro returns the registered distribution name; ok is false when
// there is none (or it is still being imported).
func loadDistro(name string) (distro, bool) {
	var d distro
	if !namePattern.MatchString(name) {
		return d, false
	}
	b, err := os.ReadFile(filepath.Join(distroDir(name), "distro.json"))
	if err != nil || json.Unmarshal(b, &d) != nil {
		return d, false
	}
	return d, true
}

func saveDistro(d distro) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	p := filepath.Join(distroDir(d.Name), "distro.json")
	if err := os.WriteFile(p+".tmp", b, 0o600); err != nil {
		return err
	}
	return os.Rename(p+".tmp", p)
}

// listEntry is a distribution as the listings show it.
type listEntry struct {
	name, state string
	isDefault   bool
}

// entries returns every distribution, the user's own first.
func entries() []listEntry {
	var out []listEntry
	if user := userDistro(); user != "" {
		out = append(out, listEntry{name: user, state: "Stopped", isDefault: true})
	}
	dirs, _ := os.ReadDir(distrosDir())
	var names []string
	for _, e := range dirs {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		state := "Installing"
		if _, ok := loadDistro(n); ok {
			state = "Stopped"
			if alive(readPid(filepath.Join(distroDir(n), "exec.pid"))) {
				state = "Running"
			}
		}
		out = append(out, listEntry{name: n, state: state})
	}
	return out
}

// userDistro is the user's own distribution every listing shows, which
// the backend must leave alone.
func userDistro() string {
	if v, ok := os.LookupEnv(envUserDistro); ok {
		return v
	}
	return "Ubuntu-24.04"
}

// cmdList implements --list [--all] [--running] [--quiet|--verbose].
func cmdList(args []string) int {
	var all, running, quiet, verbose bool
	for _, a := range args {
		switch a {
		case "--all":
			all = true
		case "--running":
			running = true
		case "--quiet", "-q":
			quiet = true
		case "--verbose", "-v":
			verbose = true
		default:
			return fail(msgInvalidUsage, a)
		}
	}
	if quiet && verbose || all && running {
		return fail(msgInvalidUsage, strings.Join(args, " "))
	}
	es := entries()
	if verbose {
		if len(es) == 0 {
			return fail(msgNoDistros)
		}
		// The layout of src/windows/common/WslClient.cpp: a column for
		// the default's "*", the name padded to the longest name plus
		// four, the state padded to 16, the version.
		width := len("NAME")
		for _, e := range es {
			width = max(width, len(e.name))
		}
		row := func(mark, name, state, version string) string {
			return fmt.Sprintf("%s %-*s%-16s%s\n", mark, width+4, name, state, version)
		}
		text := row(" ", "NAME", "STATE", "VERSION")
		for _, e := range es {
			mark := " "
			if e.isDefault {
				mark = "*"
			}
			text += row(mark, e.name, e.state, "2")
		}
		say(os.Stdout, text)
		return 0
	}
	var text string
	shown := 0
	for _, e := range es {
		if running && e.state != "Running" || !all && e.state == "Installing" {
			continue
		}
		if !quiet && e.isDefault {
			text += e.name + " (Default)\n"
		} else {
			text += e.name + "\n"
		}
		shown++
	}
	if !quiet {
		if running && shown == 0 {
			return fail("There are no running distributions.")
		}
		text = "Windows Subsystem for Linux Distributions:\n" + text
	}
	say(os.Stdout, text)
	return 0
}

// cmdVersion implements --version in the layout of the en-US
// MessagePackageVersions.
func cmdVersion() int {
	if os.Getenv(envInbox) == "1" {
		return fail(msgInboxNoSwitch, "--version")
	}
	v := os.Getenv(envVersion)
	if v == "" {
		v = defaultVersion
	}
	say(os.Stdout, "WSL version: "+v+"\nKernel version: 6.6.87.2-1\nWSLg version: 1.0.66\nMSRDC version: 1.2.6074\n"+
		"Direct3D version: 1.611.1-81528511\nDXCore version: 10.0.26100.1-240331-1435.ge-release\nWindows version: 10.0.26100.4652\n")
	return 0
}

// cmdStatus implements --status.
func cmdStatus() int {
	text := ""
	if user := userDistro(); user != "" {
		text = "Default Distribution: " + user + "\n"
	}
	say(os.Stdout, text+"Default Version: 2\n")
	return 0
}

// cmdManage implements --manage NAME --resize SIZE.
func cmdManage(args []string) int {
	if len(args) != 3 || args[1] != "--resize" {
		return fail(msgInvalidUsage, strings.Join(args, " "))
	}
	d, ok := loadDistro(args[0])
	if !ok {
		return fail(msgNotFound)
	}
	size, err := parseSize(args[2])
	if err != nil {
		return fail(msgInvalidUsage, args[2])
	}
	if failing("resize") {
		return fail("Failed to resize disk.\nError code: Wsl/Service/E_FAIL")
	}
	d.DiskBytes = size
	if err := saveDistro(d); err != nil {
		return fail("fakewsl: %v", err)
	}
	return succeeded()
}

// parseSize reads a size as .wslconfig and --resize take it: a number and
// B, KB, MB, GB or TB, in powers of 1024.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TB", 40}, {"GB", 30}, {"MB", 20}, {"KB", 10}, {"B", 0}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(strings.ToUpper(s), u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v <= 0 {
				return 0, fmt.Errorf("size %q", s)
			}
			return v << u.shift, nil
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("size %q", s)
	}
	return v, nil
}

// cmdImport implements --import NAME DIR FILE [--version N]: FILE ("-"
// for stdin) is unpacked as the distribution's root; DIR, made if
// missing, gets the ext4.vhdx WSL would keep there (empty here).
func cmdImport(args []string) int {
	var pos []string
	version := 2
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--version":
			if i+1 >= len(args) {
				return fail(msgInvalidUsage, "--version")
			}
			v, err := strconv.Atoi(args[i+1])
			if err != nil || v != 1 && v != 2 {
				return fail("The version number could not be parsed.\nError code: Wsl/ERROR_VERSION_PARSE_ERROR")
			}
			version = v
			i++
		case "--vhd":
			return fail("fakewsl: --vhd is not supported by the stand-in")
		default:
			pos = append(pos, args[i])
		}
	}
	if len(pos) != 3 {
		return fail(msgInvalidUsage, strings.Join(args, " "))
	}
	name, base, file := pos[0], pos[1], pos[2]
	if !namePattern.MatchString(name) || name == userDistro() {
		return fail(msgExists)
	}
	if err := os.MkdirAll(distrosDir(), 0o700); err != nil {
		return fail("fakewsl: %v", err)
	}
	dir := distroDir(name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fail(msgExists)
		}
		return fail("fakewsl: %v", err)
	}
	// A failed import registers nothing.
	failed := func(format string, args ...any) int {
		os.RemoveAll(dir)
		return fail(format, args...)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return failed("fakewsl: %v", err)
	}
	var in io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return failed("The system cannot find the file specified.\nError code: Wsl/Service/RegisterDistro/ERROR_FILE_NOT_FOUND")
		}
		defer f.Close()
		in = f
	}
	if err := unpack(in, filepath.Join(dir, "rootfs")); err != nil {
		return failed("Importing the distribution failed.\nbsdtar: %v\nError code: Wsl/Service/RegisterDistro/WSL_E_IMPORT_FAILED", err)
	}
	if failing("import") {
		return failed("Importing the distribution failed.\nError code: Wsl/Service/RegisterDistro/WSL_E_IMPORT_FAILED")
	}
	if err := os.WriteFile(filepath.Join(base, "ext4.vhdx"), nil, 0o600); err != nil {
		return failed("fakewsl: %v", err)
	}
	if err := saveDistro(distro{Name: name, BasePath: base, Version: version}); err != nil {
		return failed("fakewsl: %v", err)
	}
	return succeeded()
}

// cmdTerminate implements --terminate NAME: the --exec process, if one
// runs, is asked to stop its sandbox and waited for; a sandbox left by an
// --exec that was killed is stopped here.
func cmdTerminate(name string) int {
	if _, ok := loadDistro(name); !ok {
		return fail(msgNotFound)
	}
	if err := terminate(name); err != nil {
		return fail("fakewsl: terminate %s: %v", name, err)
	}
	return succeeded()
}

func terminate(name string) error {
	dir := distroDir(name)
	if pid := readPid(filepath.Join(dir, "exec.pid")); alive(pid) {
		syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(time.Minute)
		for alive(pid) {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL)
				deadline = time.Now().Add(time.Minute)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return stopSandbox(name)
}

// cmdUnregister implements --unregister NAME: terminate, then remove the
// distribution and its disk.
func cmdUnregister(name string) int {
	d, ok := loadDistro(name)
	if !ok {
		return fail(msgNotFound)
	}
	if err := terminate(name); err != nil {
		return fail("fakewsl: unregister %s: %v", name, err)
	}
	os.Remove(filepath.Join(d.BasePath, "ext4.vhdx"))
	if err := os.RemoveAll(distroDir(name)); err != nil {
		return fail("fakewsl: unregister %s: %v", name, err)
	}
	return succeeded()
}

// readPid reads a pid file; 0 when there is none.
func readPid(p string) int {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// alive reports whether pid is a process that has not exited (a zombie,
// which has, counts as gone).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}
