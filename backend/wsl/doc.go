// Package wsl is the WSL backend, Windows' default: each sandbox is a WSL 2
// distribution of its own, made from the image, with the agent running in
// it as root. It drives wsl.exe (Config.WSLPath), so it builds on every OS
// and its contract tests run on Linux, against fakewsl
// (internal/fakewsl), a stand-in for wsl.exe over the runc backend.
//
// What WSL does not keep apart. All WSL 2 distributions run in one
// lightweight VM, on one Linux kernel, in one network namespace. A sandbox
// is kept from Windows, but not from the other sandboxes nor from the
// user's own distributions: root in any of them (and every sandbox's agent
// runs as root) holds the VM's kernel. Microsoft says as much; this backend
// is for running your own agents on your own Windows machine, not for code
// you do not trust. `tupper doctor` says so too.
//
// Starting a sandbox:
//
//  1. The image becomes a tar: its layers (Spec.Image) flattened, whiteouts
//     applied, or, for a test's directory (Spec.Image nil), Spec.RootFS.
//     It is cached per image under <Root>/images, without an end-of-archive
//     marker, so that each sandbox's own entries can follow it.
//  2. `wsl --import <Prefix><id> <Root>/sandboxes/<id>/distro - --version 2`
//     reads the image's tar and then the backend's entries from stdin:
//     /etc/wsl.conf, which WSL reads when the distribution first starts,
//     so that the sandbox never runs unhardened (interop with Windows
//     programs and the Windows PATH off, the Windows drives and fstab not
//     mounted, no GPU, WSLg or \\wsl$ file server, no systemd, root the
//     default user, the sandbox's hostname); the launcher
//     /.tupper/wsl/start; and the agent, /.tupper/wsl/tupper-agent.
//  3. With Resources.DiskBytes set, `wsl --manage <distro> --resize <N>MB`
//     sizes the distribution's disk to the image plus DiskBytes plus
//     ext4's share, roughly. A WSL without --manage --resize leaves WSL's
//     default (1 TB, sparse), with a warning in the log.
//  4. `wsl -d <distro> -u root --cd / --exec /bin/sh /.tupper/wsl/start
//     <pids> /usr/bin/env -i <Spec.Env…> /.tupper/wsl/tupper-agent --addr
//     127.0.0.1:<port> …` runs the agent; this wsl.exe is the backend's
//     child for as long as the agent runs (Waiter watches it). env -i gives
//     the agent the spec's environment rather than the one WSL makes. The
//     access token is never on a command line: wsl.exe relays the
//     backend's pipe to the agent's stdin, which the agent reads with
//     --access-token-fd 0. The image needs /bin/sh and /usr/bin/env.
//  5. Start returns once the agent answers GET /health at
//     127.0.0.1:<port>, where WSL's localhost forwarding (on by default)
//     brings the VM's listening ports to Windows. Every failure undoes the
//     steps before it: the agent's wsl.exe is killed, the distribution
//     terminated and unregistered, the directory removed.
//
// Ports. The agent, and a code interpreter the agent serves
// (--code-interpreter), get host ports of their own from Config.FirstPort
// to Config.LastPort (41000–41999), recorded in the sandbox's record:
// backend.Sandbox.AgentAddr is 127.0.0.1:<agent port>, and DialSandbox
// maps ports 49983 and the interpreter's to theirs. Any other port (a
// server the user starts in a sandbox) lives in the one namespace all
// sandboxes share: DialSandbox dials it at 127.0.0.1 as it is, and reaches
// whichever sandbox (or distribution of the user's) listens there; two
// sandboxes cannot both serve port 8000, and one sandbox can reach the
// other's servers. Egress cannot be limited either: Start refuses a policy
// that denies anything, and the backend will not open for a host with
// egress off.
//
// Limits. WSL has no per-distribution CPU or memory limit: .wslconfig's
// memory and processors hold the whole VM, so Resources.CPUs and
// MemoryBytes are not applied (a process past the VM's memory is ended by
// its kernel, whichever sandbox it is in). Resources.Pids (default
// Config.DefaultPids) becomes the RLIMIT_NPROC of the agent and everything
// it starts, set by the launcher: Linux counts it per user across the
// whole VM (uid 1000 in every sandbox and in the user's own distributions
// together), and root, who holds CAP_SYS_RESOURCE there, is not held by
// it. Disk is the distribution's disk size (step 3).
//
// State comes from `wsl --list --verbose`, read by position (its header is
// translated; the state words are not, and a word the backend does not
// know is settled by `wsl --list --running --quiet`). List reads `wsl
// --list --all --quiet` and reports every distribution named Prefix+id,
// with every sandbox directory: two backends on one Windows account must
// not share a Prefix. wsl.exe prints UTF-16LE unless WSL_UTF8=1, which the
// backend sets and releases before 0.64 ignore: every output is read in
// either encoding, with or without a byte order mark, with CRLF line ends.
// Stop runs `wsl --terminate`, kills the agent's wsl.exe if it is still
// there, runs `wsl --unregister` (which deletes the distribution's disk)
// and removes the sandbox's directory; it is idempotent.
//
// Sandboxes outlive the backend's process only while their wsl.exe does:
// a new backend on the same Root reads the records and reaches, checks
// and stops them.
//
// Layout under Config.Root:
//
//	<Root>/images/<key>.tar, .json  an image as a tar, and its size on disk
//	<Root>/sandboxes/<id>/          one per sandbox, made first, removed last
//	    sandbox.json                its distribution, its ports, its wsl.exe's pid
//	    distro/                     the distribution's disk (ext4.vhdx)
//	    agent.log                   what the agent's wsl.exe printed
//
// Importing the package registers it as "wsl" (see register.go).
package wsl
