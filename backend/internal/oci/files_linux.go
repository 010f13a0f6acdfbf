package oci

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

func ReadPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid file: %w", err)
	}
	return pid, nil
}

func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// FileIO gives the runtime's create a file as stdout and stderr (and
// /dev/null as stdin). The runtime hands its stdio down to the sandbox's
// first process, so the file collects the runtime's own messages and then
// the agent's output. A file rather than a pipe matters: a pipe would stay
// open in the sandbox, and waiting for create to finish would wait for the
// sandbox to end.
type FileIO struct{ F *os.File }

func (o FileIO) Close() error           { return o.F.Close() }
func (o FileIO) Stdin() io.WriteCloser  { return nil }
func (o FileIO) Stdout() io.ReadCloser  { return nil }
func (o FileIO) Stderr() io.ReadCloser  { return nil }
func (o FileIO) Set(cmd *exec.Cmd)      { cmd.Stdout, cmd.Stderr = o.F, o.F }
func (o FileIO) CloseAfterStart() error { return nil }

// Tail returns up to the last n bytes of the file at path, trimmed.
func Tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	nr, _ := f.ReadAt(b, off)
	return string(trimSpace(b[:nr]))
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// CopyFile copies the regular file src to dst (made, or truncated), mode
// 0600.
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return out.Close()
}
