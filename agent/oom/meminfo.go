package oom

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// meminfo holds the figures of /proc/meminfo the watcher uses, in bytes.
type meminfo struct {
	Total     int64
	Available int64
}

// meminfoFile is /proc/meminfo kept open: each read at offset 0 makes
// the kernel (Linux's seq_file, gVisor's dynamic files alike) generate
// the figures anew, at the cost of one system call.
type meminfoFile struct {
	f   *os.File
	buf []byte
}

func openMeminfo(path string) (*meminfoFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &meminfoFile{f: f, buf: make([]byte, 8192)}, nil
}

func (m *meminfoFile) Close() error { return m.f.Close() }

func (m *meminfoFile) read() (meminfo, error) {
	n, err := m.f.ReadAt(m.buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return meminfo{}, err
	}
	return parseMeminfo(m.buf[:n])
}

// parseMeminfo reads MemTotal and MemAvailable (MemFree where a kernel
// has no MemAvailable) from the text of /proc/meminfo.
func parseMeminfo(b []byte) (meminfo, error) {
	var m meminfo
	var free int64 = -1
	avail := int64(-1)
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		key, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(key) {
		case "MemTotal":
			dst = &m.Total
		case "MemAvailable":
			dst = &avail
		case "MemFree":
			dst = &free
		default:
			continue
		}
		fields := bytes.Fields(rest)
		if len(fields) == 0 {
			return meminfo{}, fmt.Errorf("meminfo: %s has no value", key)
		}
		v, err := strconv.ParseInt(string(fields[0]), 10, 64)
		if err != nil {
			return meminfo{}, fmt.Errorf("meminfo: %s: %w", key, err)
		}
		if len(fields) > 1 && string(fields[1]) == "kB" {
			v <<= 10
		}
		*dst = v
	}
	switch {
	case avail >= 0:
		m.Available = avail
	case free >= 0:
		m.Available = free
	default:
		return meminfo{}, errors.New("meminfo: no MemAvailable or MemFree")
	}
	if m.Total <= 0 {
		return meminfo{}, errors.New("meminfo: no MemTotal")
	}
	return m, nil
}
