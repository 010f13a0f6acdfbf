// Command fakewsl is a stand-in for wsl.exe on Linux, so that the WSL
// backend's code runs end to end where Windows does not: the conformance
// suite drives the backend against it.
//
// It implements the subcommands the backend uses, with wsl.exe's argv and
// output: UTF-16LE without a BOM and with CRLF line ends, or UTF-8 when
// WSL_UTF8=1 (as WSL 0.64 and later do). A distribution is a directory
// under $TUPPER_FAKEWSL_STATE:
//
//	distros/<name>/distro.json  what --import and --manage recorded
//	distros/<name>/rootfs/      the imported tar, unpacked
//	distros/<name>/exec.pid     the --exec process, while it runs
//	distros/<name>/init.pid     the host pid of the sandbox's first process
//	vm/                         the runc backend's root: the one "VM"
//
// `-d NAME -u root --cd / --exec CMD…` runs CMD for real, as root, in a
// sandbox of the runc backend (backend/runc, opened as a library) whose
// root is the distribution's, and stays in the foreground as wsl.exe does.
// The sandbox's first process is this program again (--fakewsl-init),
// standing for WSL's init: it runs CMD as its child, with what fakewsl
// read on its stdin as CMD's stdin, and ends when CMD does. WSL 2 puts all
// distributions in one network namespace that Windows reaches at
// 127.0.0.1 by localhost forwarding; here each sandbox has a namespace of
// its own, and fakewsl forwards 127.0.0.1:<port> on the host into the
// sandbox's namespace for every TCP port something listens on there, as
// WSL's port tracker does for the VM (it polls, as WSL does, only faster).
// What this stand-in does not model: one kernel and one port space shared
// by all distributions (here they are apart), the VM's memory (here
// runc's default per sandbox), and a distribution's files outliving its
// processes (here writes go to the runc sandbox's own layer and are gone
// once CMD ends).
//
// A distribution's disk size (--manage NAME --resize SIZE) becomes the
// runc sandbox's disk cap less what the distribution's files take, as
// the free space of an ext4 disk of that size would be.
//
// Knobs for tests, in the environment:
//
//	TUPPER_FAKEWSL_STATE         the state directory (required)
//	TUPPER_FAKEWSL_LOG           a file each invocation appends its argv to, as a JSON line
//	TUPPER_FAKEWSL_FAIL          comma-separated failures to inject: import, resize,
//	                             exec (CMD does not start), silent (CMD runs, nothing
//	                             is forwarded: the agent never answers)
//	TUPPER_FAKEWSL_OLD=1         ignore WSL_UTF8, as WSL releases before 0.64 do
//	TUPPER_FAKEWSL_INBOX=1       know no --version, as Windows 10's inbox wsl.exe does
//	TUPPER_FAKEWSL_WSL_VERSION   the version --version reports (2.6.1.0)
//	TUPPER_FAKEWSL_USER_DISTRO   a distribution of the user's that every list shows,
//	                             default and stopped ("Ubuntu-24.04"; empty for none)
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf16"
)

// Environment knobs (see the package doc).
const (
	envState       = "TUPPER_FAKEWSL_STATE"
	envLog         = "TUPPER_FAKEWSL_LOG"
	envFail        = "TUPPER_FAKEWSL_FAIL"
	envOld         = "TUPPER_FAKEWSL_OLD"
	envInbox       = "TUPPER_FAKEWSL_INBOX"
	envVersion     = "TUPPER_FAKEWSL_WSL_VERSION"
	envUserDistro  = "TUPPER_FAKEWSL_USER_DISTRO"
	initFlag       = "--fakewsl-init"
	defaultVersion = "2.6.1.0"
)

// Messages as the en-US wsl.exe prints them
// (localization/strings/en-US/Resources.resw of microsoft/WSL).
const (
	msgSuccess       = "The operation completed successfully."
	msgNotFound      = "There is no distribution with the supplied name.\nError code: Wsl/Service/WSL_E_DISTRO_NOT_FOUND"
	msgExists        = "A distribution with the supplied name already exists. Use --name to choose a different name.\nError code: Wsl/Service/RegisterDistro/ERROR_ALREADY_EXISTS"
	msgNoDistros     = "Windows Subsystem for Linux has no installed distributions.\nYou can resolve this by installing a distribution with the instructions below:\n\nUse 'wsl.exe --list --online' to list available distributions\nand 'wsl.exe --install <Distro>' to install.\nError code: Wsl/WSL_E_DEFAULT_DISTRO_NOT_FOUND"
	msgInvalidUsage  = "Invalid command line argument: %s\nPlease use 'wsl.exe --help' to get a list of supported arguments.\nError code: Wsl/E_INVALIDARG"
	msgInboxNoSwitch = "Invalid command line option: %s\nCopyright (c) Microsoft Corporation. All rights reserved.\n\nUsage: wsl.exe [Argument] [Options...] [CommandLine]"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == initFlag {
		os.Exit(runInit(os.Args[2:]))
	}
	logArgv(os.Args[1:])
	os.Exit(run(os.Args[1:]))
}

// run dispatches on wsl.exe's argv and returns its exit code.
func run(args []string) int {
	if os.Getenv(envState) == "" {
		return fail("fakewsl: %s is not set", envState)
	}
	if len(args) == 0 {
		return fail(msgInvalidUsage, "")
	}
	switch args[0] {
	case "--import":
		return cmdImport(args[1:])
	case "--manage":
		return cmdManage(args[1:])
	case "-d", "--distribution":
		return cmdExec(args)
	case "--terminate", "-t":
		if len(args) != 2 {
			return fail(msgInvalidUsage, strings.Join(args, " "))
		}
		return cmdTerminate(args[1])
	case "--unregister":
		if len(args) != 2 {
			return fail(msgInvalidUsage, strings.Join(args, " "))
		}
		return cmdUnregister(args[1])
	case "--list", "-l":
		return cmdList(args[1:])
	case "--version", "-v":
		return cmdVersion()
	case "--status":
		return cmdStatus()
	}
	return fail(msgInvalidUsage, args[0])
}

// say prints text as wsl.exe does: CRLF line ends, UTF-16LE unless
// WSL_UTF8=1 (which old releases ignore).
func say(f *os.File, text string) {
	text = strings.ReplaceAll(text, "\n", "\r\n")
	if os.Getenv("WSL_UTF8") == "1" && os.Getenv(envOld) != "1" {
		f.WriteString(text)
		return
	}
	units := utf16.Encode([]rune(text))
	b := make([]byte, 2*len(units))
	for i, u := range units {
		b[2*i], b[2*i+1] = byte(u), byte(u>>8)
	}
	f.Write(b)
}

// fail prints a message on stderr and returns wsl.exe's exit code for
// errors.
func fail(format string, args ...any) int {
	say(os.Stderr, fmt.Sprintf(format, args...)+"\n")
	return 1
}

func succeeded() int {
	say(os.Stdout, msgSuccess+"\n")
	return 0
}

// failing reports whether the test asked for op to fail.
func failing(op string) bool {
	return slices.Contains(strings.Split(os.Getenv(envFail), ","), op)
}

// logArgv appends argv to $TUPPER_FAKEWSL_LOG, for tests that check what
// the backend ran.
func logArgv(argv []string) {
	p := os.Getenv(envLog)
	if p == "" {
		return
	}
	b, _ := json.Marshal(map[string]any{"argv": argv, "time": time.Now().UTC()})
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	f.Write(append(b, '\n'))
}
