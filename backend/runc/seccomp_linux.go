package runc

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside every sandbox. The filter allows by
// default and refuses these: the system calls that a program in a sandbox
// has no use for and that reach kernel code where container escapes have
// been found, or that change what the host shares with every sandbox.
// Docker's default profile is the other way round (an allow list); a deny
// list keeps every ordinary program working, new system calls included,
// while the user namespace and the missing capabilities refuse most of
// these anyway. The filter is the second wall.
var deniedSyscalls = []string{
	// Kernel modules, kexec, reboot, swap, accounting, clocks.
	"init_module", "finit_module", "delete_module", "create_module", "query_module", "get_kernel_syms",
	"kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct",
	"settimeofday", "stime", "clock_settime", "clock_adjtime", "adjtimex",
	// Mounting and namespaces: a sandbox's mounts are made for it.
	"mount", "umount", "umount2", "pivot_root", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "move_mount", "mount_setattr",
	// File handles (the "shocker" escape), quotas, old interfaces.
	"open_by_handle_at", "name_to_handle_at", "quotactl", "quotactl_fd",
	"nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "lookup_dcookie", "vm86", "vm86old",
	// Kernel key rings, eBPF, perf, userfaultfd: large attack surfaces.
	"add_key", "request_key", "keyctl", "bpf", "perf_event_open", "userfaultfd",
	// io_uring: most of the kernel's recent privilege escalations.
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Reading other processes' memory or the kernel's log, I/O ports.
	"process_vm_readv", "process_vm_writev", "kcmp", "syslog", "iopl", "ioperm",
	"fanotify_init",
	// The 32-bit socket multiplexer, whose arguments sit in memory where
	// a filter cannot see them (socket's own rule below is on the
	// native call).
	"socketcall",
}

// seccompProfile returns the sandbox's system call filter for the Go
// architecture arch: deniedSyscalls refused with EPERM, new user
// namespaces refused (clone and unshare with CLONE_NEWUSER: inside one, a
// process would hold every capability over the namespaces it makes, and
// reach the kernel code that mounting and networking expose), clone3
// answered ENOSYS, since its flags cannot be filtered, so that libc falls
// back to clone, and vsock sockets refused as a kernel without them would.
func seccompProfile(arch string) *specs.LinuxSeccomp {
	eperm, enosys, eafnosupport := uint(unix.EPERM), uint(unix.ENOSYS), uint(unix.EAFNOSUPPORT)
	newUser := specs.LinuxSeccompArg{Index: 0, Value: unix.CLONE_NEWUSER, ValueTwo: unix.CLONE_NEWUSER, Op: specs.OpMaskedEqual}
	return &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: architectures(arch),
		Syscalls: []specs.LinuxSyscall{
			{Names: deniedSyscalls, Action: specs.ActErrno, ErrnoRet: &eperm},
			{Names: []string{"unshare"}, Action: specs.ActErrno, ErrnoRet: &eperm, Args: []specs.LinuxSeccompArg{newUser}},
			{Names: []string{"clone"}, Action: specs.ActErrno, ErrnoRet: &eperm, Args: []specs.LinuxSeccompArg{newUser}},
			{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
			// vsock is not confined by network namespaces: on a host that
			// is itself a VM, it would reach the hypervisor's services
			// past the sandbox's firewall.
			{Names: []string{"socket"}, Action: specs.ActErrno, ErrnoRet: &eafnosupport, Args: []specs.LinuxSeccompArg{{Index: 0, Value: unix.AF_VSOCK, Op: specs.OpEqualTo}}},
		},
	}
}

// architectures are the system call tables the filter covers on arch: the
// native one and the compatible ones a process could switch to (32-bit
// calls on x86-64), which must be filtered too.
func architectures(arch string) []specs.Arch {
	switch arch {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	}
	return nil
}
