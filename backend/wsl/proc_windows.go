package wsl

import "syscall"

// createNoWindow keeps each wsl.exe the backend starts from opening a
// console window of its own when tupper runs without one (as a service).
const createNoWindow = 0x08000000

func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{HideWindow: true, CreationFlags: createNoWindow}
}
