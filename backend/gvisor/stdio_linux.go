package gvisor

import (
	"io"
	"os"
	"os/exec"
)

// fileIO gives runsc create a file as stdout and stderr (and /dev/null as
// stdin). runsc hands its stdio down to the sandbox's first process, so
// the file collects runsc's own messages and then the agent's output. A
// file rather than a pipe matters: a pipe would stay open in the sandbox,
// and waiting for runsc create to finish would wait for the sandbox to end.
type fileIO struct{ f *os.File }

func (o fileIO) Close() error           { return o.f.Close() }
func (o fileIO) Stdin() io.WriteCloser  { return nil }
func (o fileIO) Stdout() io.ReadCloser  { return nil }
func (o fileIO) Stderr() io.ReadCloser  { return nil }
func (o fileIO) Set(cmd *exec.Cmd)      { cmd.Stdout, cmd.Stderr = o.f, o.f }
func (o fileIO) CloseAfterStart() error { return nil }

// tail returns up to the last n bytes of the file at path, trimmed.
func tail(path string, n int64) string {
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
