package interpreter

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// bashKernel keeps one bash process per context: variables, functions and
// the working directory carry from cell to cell. Each cell is a file that
// bash sources with stdin from /dev/null; after it, bash writes a marker
// to stdout and stderr and the cell's status to descriptor 3, so the
// kernel knows where the cell's output ends.
type bashKernel struct {
	*process
	status chan int
	marks  chan string // the stream whose marker was just seen
	mark   []byte
	cell   string // the file each cell is written to
	dir    string // private directory holding cell
	log    *slog.Logger
	execs  int

	running runningCell
}

func startBash(spec kernelSpec) (*bashKernel, error) {
	dir, err := os.MkdirTemp("", "tupper-bash-")
	if err != nil {
		return nil, fmt.Errorf("start the bash kernel: %w", err)
	}
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	k := &bashKernel{
		status: make(chan int, 4), marks: make(chan string, 8),
		mark: []byte("\x1eTUPPER-" + hex.EncodeToString(nonce[:]) + "\x1e"),
		cell: filepath.Join(dir, "cell.sh"), dir: dir, log: spec.log,
	}
	p, err := startProcess(spec)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	k.process = p
	go k.scan("stdout", p.stdout)
	go k.scan("stderr", p.stderr)
	go k.readStatus(p.fd3)
	// An interrupt ends the cell, not the shell: the trap returns from
	// the sourced cell file.
	if _, err := io.WriteString(k.stdin, "trap 'return 130 2>/dev/null' INT\n"); err != nil {
		k.close()
		return nil, fmt.Errorf("start the bash kernel: %w", err)
	}
	return k, nil
}

func (k *bashKernel) readStatus(f *os.File) {
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			k.status <- n
		}
	}
}

// scan passes one stream to the running cell, up to and without the
// markers, which it reports on k.marks.
func (k *bashKernel) scan(name string, f *os.File) {
	defer f.Close()
	var pending []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.Index(pending, k.mark)
			if i < 0 {
				break
			}
			k.emit(name, pending[:i])
			pending = pending[i+len(k.mark):]
			k.marks <- name
		}
		// Hold back what may be the start of a marker, and an unfinished
		// UTF-8 sequence.
		keep := partialSuffix(pending, k.mark)
		send, rest := splitUTF8(pending[:len(pending)-keep])
		k.emit(name, send)
		pending = append(rest, pending[len(pending)-keep:]...)
		if err != nil {
			k.emit(name, pending)
			return
		}
	}
}

func (k *bashKernel) emit(name string, b []byte) {
	if len(b) == 0 {
		return
	}
	out := k.running.get()
	if out != nil {
		out.stream(name, string(b))
	} else {
		k.log.Debug("bash output between cells", "stream", name, "bytes", len(b))
	}
}

// partialSuffix returns the length of the longest end of b that is a
// proper beginning of mark.
func partialSuffix(b, mark []byte) int {
	for l := min(len(b), len(mark)-1); l > 0; l-- {
		if bytes.HasPrefix(mark, b[len(b)-l:]) {
			return l
		}
	}
	return 0
}

func (k *bashKernel) execute(ctx context.Context, code string, env map[string]string, out sink) error {
	if err := os.WriteFile(k.cell, []byte(code), 0o600); err != nil {
		return fmt.Errorf("write the cell: %w", err)
	}
	defer k.running.set(out)()
	k.execs++
	out.count(k.execs)
	if _, err := io.WriteString(k.stdin, cellCommand(k.cell, k.mark, env)); err != nil {
		return errKernelGone
	}
	status, marks := -1, 0
	done := ctx.Done()
	var intr interruption
	defer intr.stop()
	interrupt := func() { _ = k.signalGroup(syscall.SIGINT) }
	for status < 0 || marks < 2 {
		select {
		case status = <-k.status:
		case <-k.marks:
			marks++
		case <-k.exited:
			return errKernelGone
		case <-done:
			done = nil
			intr.start()
			interrupt()
		case <-intr.repeat():
			interrupt()
		case <-intr.giveUp():
			k.close()
			return errUnresponsive
		}
	}
	switch {
	case status == 130 && ctx.Err() != nil:
		out.fail("KeyboardInterrupt", "the cell was interrupted", "")
	case status != 0:
		out.fail("CommandExitError", fmt.Sprintf("exit status %d", status), "")
	}
	return nil
}

// cellCommand is the line that runs one cell: it exports env for the cell
// and puts the variables back as they were after it.
func cellCommand(cell string, mark []byte, env map[string]string) string {
	var b strings.Builder
	keys := slices.Sorted(maps.Keys(env))
	if len(keys) > 0 {
		fmt.Fprintf(&b, "__tupper_env=$(for __k in %s; do if [ -n \"${!__k+x}\" ]; then printf 'export %%s=%%q\\n' \"$__k\" \"${!__k}\"; else printf 'unset %%s\\n' \"$__k\"; fi; done); ", strings.Join(keys, " "))
		for _, k := range keys {
			fmt.Fprintf(&b, "export %s=%s; ", k, shellQuote(env[k]))
		}
	}
	fmt.Fprintf(&b, ". %s </dev/null; __tupper_rc=$?; ", shellQuote(cell))
	if len(keys) > 0 {
		b.WriteString("eval \"$__tupper_env\"; unset __tupper_env __k; ")
	}
	octal := func(s []byte) string {
		var o strings.Builder
		for _, c := range s {
			fmt.Fprintf(&o, "\\%03o", c)
		}
		return o.String()
	}
	fmt.Fprintf(&b, "printf '%s'; printf '%s' >&2; printf '%%d\\n' \"$__tupper_rc\" >&3\n", octal(mark), octal(mark))
	return b.String()
}

// shellQuote quotes s for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (k *bashKernel) close() {
	k.process.close()
	os.RemoveAll(k.dir)
}
