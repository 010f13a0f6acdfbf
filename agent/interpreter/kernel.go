package interpreter

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// A kernel runs one context's cells, one at a time, and keeps the state
// they leave. Its methods are called by one goroutine at a time, except
// close, which may come from anywhere.
type kernel interface {
	// execute runs code with env added to the environment, sends its
	// output to out in order, and returns when the cell has ended. When
	// ctx ends first, it interrupts the cell and still waits for its end;
	// a cell that ignores the interrupt ends with errUnresponsive, and the
	// kernel is then closed.
	execute(ctx context.Context, code string, env map[string]string, out sink) error
	// close ends the kernel's processes. A running execute returns
	// errKernelGone.
	close()
}

// sink receives one cell's output.
type sink interface {
	stream(name, text string)
	result(data map[string]any, main bool)
	fail(name, value, traceback string)
	count(n int)
}

var (
	// errKernelGone: the kernel's process ended (it was closed, ran out
	// of memory, or the cell ended it) before the cell did.
	errKernelGone = errors.New("the kernel's process ended")
	// errUnresponsive: the cell ignored the interrupt.
	errUnresponsive = errors.New("the cell did not stop when interrupted")
)

// Bounds on a kernel's life.
const (
	// interruptGrace is how long a cell has to end once interrupted
	// before its kernel is closed.
	interruptGrace = 5 * time.Second
	// interruptRepeat is how often the interrupt is sent again meanwhile:
	// one that lands between two steps of a kernel (before a loop starts,
	// say) is lost.
	interruptRepeat = 500 * time.Millisecond
	// maxEventLine bounds one event from a kernel: a large image or
	// DataFrame is a few megabytes.
	maxEventLine = 64 << 20
)

// interruption paces the interrupts of a cell whose client went away. Its
// zero value has not started: its channels are nil.
type interruption struct {
	ticker *time.Ticker
	timer  *time.Timer
}

func (i *interruption) start() {
	i.ticker = time.NewTicker(interruptRepeat)
	i.timer = time.NewTimer(interruptGrace)
}

func (i *interruption) repeat() <-chan time.Time {
	if i.ticker == nil {
		return nil
	}
	return i.ticker.C
}

func (i *interruption) giveUp() <-chan time.Time {
	if i.timer == nil {
		return nil
	}
	return i.timer.C
}

func (i *interruption) stop() {
	if i.ticker != nil {
		i.ticker.Stop()
		i.timer.Stop()
	}
}

// runningCell is the output of the cell a kernel runs, if any, for the
// goroutines that relay what its process writes.
type runningCell struct {
	mu  sync.Mutex
	out sink
}

// set makes out the running cell's until the returned function is called.
func (c *runningCell) set(out sink) (unset func()) {
	c.mu.Lock()
	c.out = out
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.out = nil
		c.mu.Unlock()
	}
}

// get returns the running cell's output, nil between cells.
func (c *runningCell) get() sink {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out
}

// event is one line a kernel process writes on descriptor 3.
type event struct {
	Ev        string         `json:"ev"`
	Name      string         `json:"name,omitempty"`
	Text      string         `json:"text,omitempty"`
	Data      map[string]any `json:"data,omitempty"`
	Main      bool           `json:"main,omitempty"`
	Value     string         `json:"value,omitempty"`
	Traceback string         `json:"traceback,omitempty"`
	N         int            `json:"n,omitempty"`
	Message   string         `json:"message,omitempty"`
}

// procKernel is a kernel in a process of its own that reads commands as
// JSON lines on stdin and writes events on descriptor 3: the Python
// bridge and the JavaScript driver (kernels/).
type procKernel struct {
	*process
	lang string
	// interrupt asks the process to interrupt the running cell.
	interrupt func() error
	events    chan event
	log       *slog.Logger

	cell runningCell // for what the process prints directly
}

// startProcKernel starts argv in dir with env and waits for its ready
// event. interrupt is called with the kernel when a cell must stop.
func startProcKernel(ctx context.Context, spec kernelSpec, interrupt func(*procKernel) error) (*procKernel, error) {
	p, err := startProcess(spec)
	if err != nil {
		return nil, err
	}
	k := &procKernel{process: p, lang: spec.lang, events: make(chan event, 64), log: spec.log}
	k.interrupt = func() error { return interrupt(k) }
	go k.relay("stdout", p.stdout, spec.rawOutput)
	go k.relay("stderr", p.stderr, spec.rawOutput)
	go k.readEvents(p.fd3)

	select {
	case ev, ok := <-k.events:
		switch {
		case ok && ev.Ev == "ready":
			return k, nil
		case ok && ev.Ev == "fatal":
			k.close()
			return nil, errors.New(ev.Message)
		default:
			k.close()
			return nil, fmt.Errorf("the %s kernel exited while starting: see the interpreter's log", spec.lang)
		}
	case <-ctx.Done():
		k.close()
		return nil, fmt.Errorf("start the %s kernel: %w", spec.lang, context.Cause(ctx))
	}
}

// process is a started kernel process and the parent's ends of its pipes;
// exited closes once it has been waited for.
type process struct {
	cmd                 *exec.Cmd
	stdin               *os.File
	stdout, stderr, fd3 *os.File
	exited              chan struct{}
}

// signalGroup sends sig to the process and everything its cells started.
func (p *process) signalGroup(sig syscall.Signal) error {
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// close ends the process's group and waits for the process.
func (p *process) close() {
	p.stdin.Close()
	_ = p.signalGroup(syscall.SIGKILL)
	<-p.exited
}

// startProcess starts spec's program in a process group of its own, with
// pipes for its stdin, stdout, stderr and descriptor 3: pipes of our own
// rather than exec's, whose Wait would close them under the readers and
// lose the last of what the process wrote.
func startProcess(spec kernelSpec) (*process, error) {
	var pipes [4][2]*os.File // stdin, stdout, stderr, fd 3: {read, write}
	closeAll := func(n int) {
		for _, p := range pipes[:n] {
			p[0].Close()
			p[1].Close()
		}
	}
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(i)
			return nil, err
		}
		pipes[i] = [2]*os.File{r, w}
	}
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Dir, cmd.Env = spec.dir, spec.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pipes[0][0], pipes[1][1], pipes[2][1]
	cmd.ExtraFiles = []*os.File{pipes[3][1]}
	// Its own process group: closing the kernel ends what its cells
	// started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		closeAll(len(pipes))
		return nil, fmt.Errorf("start the %s kernel: %w", spec.lang, err)
	}
	// The child's ends are the child's now.
	pipes[0][0].Close()
	pipes[1][1].Close()
	pipes[2][1].Close()
	pipes[3][1].Close()
	p := &process{cmd: cmd, stdin: pipes[0][1], stdout: pipes[1][0], stderr: pipes[2][0], fd3: pipes[3][0], exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		spec.log.Debug("kernel exited", "language", spec.lang, "err", err)
		close(p.exited)
	}()
	return p, nil
}

// kernelSpec is how to start a kernel process.
type kernelSpec struct {
	lang string
	argv []string
	dir  string
	env  []string
	log  *slog.Logger
	// rawOutput says whether what the process writes to its stdout and
	// stderr is the running cell's output (node: what the cell's child
	// processes print) or only the kernel's own log (python: ipykernel
	// already forwards the cell's output as events).
	rawOutput bool
}

// readEvents decodes the process's events until it closes descriptor 3.
func (k *procKernel) readEvents(f *os.File) {
	defer close(k.events)
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := readLine(r, maxEventLine)
		switch {
		case errors.Is(err, errLineTooLong):
			// Not silently: the cell learns that some of its output is
			// missing (a result too large to carry, say).
			k.log.Warn("dropped an event from the kernel", "language", k.lang, "err", err)
			k.events <- event{Ev: "stream", Name: "stderr", Text: fmt.Sprintf("[tupper: an output of this cell was over %d MiB and was dropped]\n", maxEventLine>>20)}
			continue
		case err != nil:
			return
		}
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			k.log.Warn("malformed event from the kernel", "language", k.lang, "err", err)
			continue
		}
		k.events <- ev
	}
}

var errLineTooLong = fmt.Errorf("an event longer than %d bytes", maxEventLine)

// readLine reads one line without its newline. A line longer than max is
// consumed whole and answered with errLineTooLong; a last line without a
// newline is dropped with the reader's error.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) > max+1 {
			tooLong, line = true, nil
		}
		if !tooLong {
			line = append(line, chunk...)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			return nil, err
		case tooLong:
			return nil, errLineTooLong
		}
		return line[:len(line)-1], nil
	}
}

// relay passes what the process writes on one of its standard streams to
// the running cell when toCell, else to the log.
func (k *procKernel) relay(name string, r *os.File, toCell bool) {
	defer r.Close()
	buf := make([]byte, 32<<10)
	var rest []byte
	for {
		n, err := r.Read(buf)
		var text []byte
		text, rest = splitUTF8(append(rest, buf[:n]...))
		if err != nil {
			text = append(text, rest...)
		}
		if len(text) > 0 {
			out := k.cell.get()
			if toCell && out != nil {
				out.stream(name, string(text))
			} else {
				k.log.Debug("kernel output", "language", k.lang, "stream", name, "text", string(text))
			}
		}
		if err != nil {
			return
		}
	}
}

func (k *procKernel) execute(ctx context.Context, code string, env map[string]string, out sink) error {
	defer k.cell.set(out)()
	if err := k.writeCommand(map[string]any{"op": "execute", "code": code, "env": env}); err != nil {
		return errKernelGone
	}
	done := ctx.Done()
	var intr interruption
	defer intr.stop()
	for {
		select {
		case ev, ok := <-k.events:
			if !ok {
				return errKernelGone
			}
			switch ev.Ev {
			case "stream":
				out.stream(ev.Name, ev.Text)
			case "result":
				out.result(ev.Data, ev.Main)
			case "error":
				out.fail(ev.Name, ev.Value, ev.Traceback)
			case "count":
				out.count(ev.N)
			case "done":
				return nil
			case "died":
				k.log.Warn("kernel died", "language", k.lang, "message", ev.Message)
			}
		case <-done:
			done = nil
			intr.start()
			k.sendInterrupt()
		case <-intr.repeat():
			k.sendInterrupt()
		case <-intr.giveUp():
			k.close()
			return errUnresponsive
		}
	}
}

func (k *procKernel) sendInterrupt() {
	if err := k.interrupt(); err != nil {
		k.log.Warn("interrupt the kernel", "language", k.lang, "err", err)
	}
}

// writeCommand sends one command line to the process.
func (k *procKernel) writeCommand(cmd map[string]any) error {
	b, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	_, err = k.stdin.Write(append(b, '\n'))
	return err
}
