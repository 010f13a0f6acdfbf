package status

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// readCPU reads the aggregate "cpu" line of /proc/stat. Idle time is idle
// plus iowait; guest time is already counted in user and nice, so it is
// left out of the total.
func readCPU() (cpuSample, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 5 || fields[0] != "cpu" {
		return cpuSample{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]uint64 // user nice system idle iowait irq softirq steal
	for i := range v {
		if i+1 >= len(fields) {
			break
		}
		if v[i], err = strconv.ParseUint(fields[i+1], 10, 64); err != nil {
			return cpuSample{}, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	var total uint64
	for _, x := range v {
		total += x
	}
	idle := v[3] + v[4]
	return cpuSample{at: time.Now(), busy: total - idle, total: total}, nil
}

// readMem returns MemTotal and MemAvailable from /proc/meminfo, in bytes.
func readMem() (total, available uint64, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var haveTotal, haveAvail bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "MemTotal" && key != "MemAvailable") {
			continue
		}
		fields := strings.Fields(rest) // "16384 kB"
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/meminfo %s: %w", key, err)
		}
		if len(fields) > 1 && fields[1] == "kB" {
			n <<= 10
		}
		if key == "MemTotal" {
			total, haveTotal = n, true
		} else {
			available, haveAvail = n, true
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !haveTotal || !haveAvail {
		return 0, 0, fmt.Errorf("/proc/meminfo lacks MemTotal or MemAvailable")
	}
	return total, available, nil
}

// diskUsage returns the used and total bytes of the filesystem holding
// path, counted as df counts them: used is total minus free blocks.
func diskUsage(path string) (used, total uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := uint64(st.Bsize)
	return (st.Blocks - st.Bfree) * bs, st.Blocks * bs, nil
}
