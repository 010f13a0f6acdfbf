// Package progress shows how far long work has come: image builds and
// pulls, template builds, benchmarks.
//
// A Printer shows Tasks in one of three formats:
//
//   - Terminal: one line, redrawn in place, with the task's label, a bar,
//     its step ("[3/7] install packages") or amount ("12.3/40.1 MiB"), the
//     rate, the time so far and, where one can be made, an estimate of the
//     time left. Notes and each task's outcome print above it.
//
//   - Plain: for scripts and logs: one line per event, never redrawn, with
//     no carriage returns or escape sequences. Each line is a Record:
//
//     progress event=start op=build item=base
//     progress event=step op=build item=base step=5/11 name="install packages" elapsed=14.2s
//     progress event=update op=build item=base step=5/11 name="install packages" detail=unpacked packages=120/451 eta=61.0s elapsed=31.0s
//     progress event=update op=pull item=tools:1 detail=download bytes=1048576/3145728 rate=524288 eta=4.0s elapsed=2.0s
//     progress event=part op=pull item=tools:1 detail=download bytes=3145728 part=0123456789ab elapsed=6.1s
//     progress event=done op=pull item=tools:1 result=sha256:… elapsed=6.3s
//     progress event=failed op=build item=base step=5/11 name="install packages" error="…" elapsed=40.0s
//
//     A task's amount is repeated at most every Printer.Interval (and when
//     it is complete or starts counting something else), so a long
//     download prints a line every few seconds, not one per read.
//
//   - JSON: the same Records as JSON objects, one a line.
//
// FormatFor picks Terminal or Plain by whether the writer is a terminal.
package progress

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/term"
)

// Format is how a Printer shows progress.
type Format int

const (
	// Plain is lines for scripts: one Record a line.
	Plain Format = iota
	// Terminal is one line redrawn in place, for people.
	Terminal
	// JSON is the Records of Plain as JSON objects, one a line.
	JSON
)

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// FormatFor returns JSON when asJSON is set, else Terminal when w is a
// terminal, else Plain.
func FormatFor(w io.Writer, asJSON bool) Format {
	switch {
	case asJSON:
		return JSON
	case IsTerminal(w):
		return Terminal
	}
	return Plain
}

// DefaultInterval is how often the Plain and JSON formats repeat a moving
// amount.
const DefaultInterval = 5 * time.Second

// Printer shows tasks' progress on a writer. A nil Printer shows nothing:
// its Start returns a nil Task, whose methods do nothing. A Printer is
// safe for concurrent use; in the Terminal format it keeps a goroutine
// that redraws the line each second while a task runs, so that the time
// moves when the work says nothing.
type Printer struct {
	// Interval is how often Plain and JSON repeat a moving amount; zero
	// means DefaultInterval.
	Interval time.Duration

	mu     sync.Mutex
	w      io.Writer
	format Format
	now    func() time.Time
	// width returns the terminal's width in cells.
	width func() int
	// tickEvery is how often the Terminal's line is redrawn while a task
	// runs; zero never.
	tickEvery time.Duration

	// Terminal: shown is the task the line shows, drawn whether a line is
	// on the screen, and lastDraw when it was drawn.
	shown    *Task
	drawn    bool
	lastDraw time.Time
	// running counts the tasks not ended; stop ends the ticker.
	running int
	stop    chan struct{}
}

// New returns a Printer that writes to w in format f.
func New(w io.Writer, f Format) *Printer {
	p := &Printer{w: w, format: f, now: time.Now, width: func() int { return 80 }, tickEvery: time.Second}
	if fd, ok := w.(interface{ Fd() uintptr }); ok {
		p.width = func() int {
			if cols, _, err := term.GetSize(int(fd.Fd())); err == nil && cols > 0 {
				return cols
			}
			return 80
		}
	}
	return p
}

// Format returns the format p writes in; Plain for a nil Printer.
func (p *Printer) Format() Format {
	if p == nil {
		return Plain
	}
	return p.format
}

// Start begins a task: op is what it does ("build", "pull"), item what it
// does it to ("base").
func (p *Printer) Start(op, item string) *Task {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &Task{p: p, op: op, item: item, start: p.now()}
	p.running++
	if p.format == Terminal {
		p.shown = t
		if p.stop == nil && p.tickEvery > 0 {
			p.stop = make(chan struct{})
			go p.tick(p.stop, p.tickEvery)
		}
		p.draw(t, true)
		return t
	}
	p.emit(t.record(EventStart))
	return t
}

// Println prints a line of text that is not progress, such as a builder's
// own output: above the Terminal's line; as it is in the Plain format; as
// {"type":"log","message":line} in the JSON format.
func (p *Printer) Println(line string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.above(line)
}

// Writer returns an io.Writer whose lines Println prints.
func (p *Printer) Writer() io.Writer {
	return &lineWriter{p: p}
}

// lineWriter passes whole lines to Println, keeping a partial line until
// it ends.
type lineWriter struct {
	p    *Printer
	mu   sync.Mutex
	part []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, b...)
	for {
		i := indexNewline(w.part)
		if i < 0 {
			return len(b), nil
		}
		w.p.Println(string(w.part[:i]))
		w.part = w.part[i+1:]
	}
}

func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

// Close stops the Terminal's redrawing and clears its line. Tasks that
// have not ended are left as they are.
func (p *Printer) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopTicker()
	p.clear()
	p.shown = nil
	return nil
}

func (p *Printer) stopTicker() {
	if p.stop != nil {
		close(p.stop)
		p.stop = nil
	}
}

// tick redraws the Terminal's line every d until stop closes.
func (p *Printer) tick(stop chan struct{}, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.mu.Lock()
			if p.shown != nil {
				p.draw(p.shown, true)
			}
			p.mu.Unlock()
		}
	}
}

// emit writes r in the Plain or JSON format. p.mu must be held.
func (p *Printer) emit(r Record) {
	r.Type = RecordType
	if p.format == JSON {
		b, _ := json.Marshal(r)
		p.w.Write(append(b, '\n'))
		return
	}
	fmt.Fprintln(p.w, r.String())
}

// above prints line as a permanent line: above the Terminal's line, which
// is drawn again below it. p.mu must be held.
func (p *Printer) above(line string) {
	if p.format == JSON {
		b, _ := json.Marshal(struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}{"log", line})
		p.w.Write(append(b, '\n'))
		return
	}
	p.clear()
	fmt.Fprintln(p.w, line)
	if p.format == Terminal && p.shown != nil {
		p.draw(p.shown, true)
	}
}

// drawInterval is the least time between two draws of the Terminal's line
// that nothing forces.
const drawInterval = 100 * time.Millisecond

// draw shows t on the Terminal's line, unless it was drawn less than
// drawInterval ago and force is not set. p.mu must be held.
func (p *Printer) draw(t *Task, force bool) {
	now := p.now()
	if !force && p.drawn && now.Sub(p.lastDraw) < drawInterval {
		return
	}
	p.shown = t
	p.lastDraw = now
	fmt.Fprint(p.w, "\r\033[K"+t.line(now, p.width()-1))
	p.drawn = true
}

// clear removes the Terminal's line. p.mu must be held.
func (p *Printer) clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

// ended notes that t ended. p.mu must be held.
func (p *Printer) ended(t *Task) {
	p.running--
	if p.shown == t {
		p.shown = nil
	}
	if p.running <= 0 {
		p.stopTicker()
	}
}

func (p *Printer) interval() time.Duration {
	if p.Interval > 0 {
		return p.Interval
	}
	return DefaultInterval
}
