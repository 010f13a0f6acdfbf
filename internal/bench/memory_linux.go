package bench

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SandboxMemory returns, for each sandbox id that has processes on this
// host, the proportional set size (PSS, in MiB) of those processes: every
// process whose command line holds the id, as the gVisor backend's runsc
// sandbox, gofer and their helpers do. PSS shares pages that processes map
// together among them, so the figures add up to what the host spends.
func SandboxMemory(ids []string) map[string]float64 {
	out := map[string]float64{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		for _, id := range ids {
			if !bytes.Contains(cmdline, []byte(id)) {
				continue
			}
			if kb, ok := pssKB(dir); ok {
				out[id] += float64(kb) / 1024
			}
			break
		}
	}
	return out
}

// pssKB reads the Pss line of a process's smaps_rollup.
func pssKB(dir string) (int64, bool) {
	f, err := os.Open(filepath.Join(dir, "smaps_rollup"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Pss:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		return kb, err == nil
	}
	return 0, false
}
