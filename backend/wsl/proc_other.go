//go:build !windows

package wsl

import "syscall"

// sysProcAttr puts each wsl the backend starts (the stand-in, off
// Windows) in a process group of its own, so that a signal meant for
// tupper's group, such as a terminal's Ctrl-C, does not end sandboxes.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
