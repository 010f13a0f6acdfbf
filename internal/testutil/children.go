package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Descendants returns the processes below pid (its children, theirs, and so
// on) as /proc shows them now: a cheap way to watch what one process runs,
// where scanning all of /proc on a busy host is slow.
func Descendants(pid int) []int {
	var out []int
	next := []int{pid}
	for len(next) > 0 {
		p := next[0]
		next = next[1:]
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(p) + "/task/*/children")
		for _, task := range tasks {
			b, _ := os.ReadFile(task)
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
					next = append(next, c)
				}
			}
		}
	}
	return out
}

// CommandLine returns the arguments of process pid, or nil once it is gone.
func CommandLine(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}
