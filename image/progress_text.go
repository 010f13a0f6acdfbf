package image

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
)

// TextProgress renders progress for people, on a terminal or into a log.
//
// On a terminal it keeps one status line, redrawn at most ten times a second,
// with a bar for each item in flight, and prints a permanent line above it
// when an item finishes or a message arrives. Elsewhere it prints only the
// permanent lines, plus a line per item in flight every few seconds.
//
// A TextProgress is safe for concurrent use. Call Close when the operation
// ends, so the status line does not linger.
type TextProgress struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	active   map[string]*itemProgress
	order    []string // keys of active, oldest first
	drawn    bool     // a status line is on the screen
	lastDraw time.Time
	lastLog  time.Time
	now      func() time.Time
}

type itemProgress struct {
	phase      Phase
	item       string
	cur, total int64
}

const (
	drawInterval = 100 * time.Millisecond
	logInterval  = 5 * time.Second
	statusWidth  = 118
)

// NewTextProgress returns a Progress that writes to w, redrawing a status line
// if w is a terminal.
func NewTextProgress(w io.Writer) *TextProgress {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = isatty.IsTerminal(f.Fd())
	}
	// The first periodic log line comes logInterval after the start: short
	// operations print only their permanent lines.
	return &TextProgress{w: w, tty: tty, active: map[string]*itemProgress{}, now: time.Now, lastLog: time.Now()}
}

// Event implements Progress.
func (p *TextProgress) Event(e Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := string(e.Phase) + "\x00" + e.Item
	if e.Message != "" && !e.Done {
		p.println(formatMessage(e))
		return
	}
	if e.Done {
		delete(p.active, key)
		p.order = remove(p.order, key)
		p.println(formatDone(e))
		return
	}
	it, ok := p.active[key]
	if !ok {
		it = &itemProgress{phase: e.Phase, item: e.Item}
		p.active[key] = it
		p.order = append(p.order, key)
	}
	it.cur, it.total = e.Current, e.Total
	now := p.now()
	if p.tty {
		if now.Sub(p.lastDraw) >= drawInterval || !p.drawn {
			p.draw()
		}
		return
	}
	if now.Sub(p.lastLog) >= logInterval {
		p.lastLog = now
		for _, k := range p.order {
			a := p.active[k]
			fmt.Fprintf(p.w, "%-8s %s %s\n", a.phase, shortItem(a.item), amount(a.cur, a.total))
		}
	}
}

// Close clears the status line.
func (p *TextProgress) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	p.active = map[string]*itemProgress{}
	p.order = nil
	return nil
}

// println prints a permanent line, keeping the status line below it.
func (p *TextProgress) println(line string) {
	p.clear()
	fmt.Fprintln(p.w, line)
	if p.tty && len(p.order) > 0 {
		p.draw()
	}
}

func (p *TextProgress) clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

func (p *TextProgress) draw() {
	p.lastDraw = p.now()
	if len(p.order) == 0 {
		p.clear()
		return
	}
	barWidth := 24
	if len(p.order) > 1 {
		barWidth = 10
	}
	parts := make([]string, 0, len(p.order))
	for _, k := range p.order {
		a := p.active[k]
		parts = append(parts, fmt.Sprintf("%-8s %s %s %s", a.phase, shortItem(a.item), bar(a.cur, a.total, barWidth), amount(a.cur, a.total)))
	}
	line := strings.Join(parts, " | ")
	if r := []rune(line); len(r) > statusWidth {
		line = string(r[:statusWidth-1]) + "…"
	}
	fmt.Fprint(p.w, "\r\033[K"+line)
	p.drawn = true
}

func formatMessage(e Event) string {
	switch e.Phase {
	case PhaseBuild:
		return "build    " + e.Message
	case PhaseDone:
		return fmt.Sprintf("done     %s %s", e.Item, e.Message)
	}
	if e.Item == "" {
		return fmt.Sprintf("%-8s %s", e.Phase, e.Message)
	}
	return fmt.Sprintf("%-8s %s %s", e.Phase, shortItem(e.Item), e.Message)
}

func formatDone(e Event) string {
	if e.Message != "" {
		return fmt.Sprintf("%-8s %s %s", e.Phase, shortItem(e.Item), e.Message)
	}
	return fmt.Sprintf("%-8s %s done %s", e.Phase, shortItem(e.Item), humanBytes(e.Current))
}

// shortItem shortens digests to what people compare by eye.
func shortItem(s string) string {
	if strings.HasPrefix(s, idPrefix) && len(s) > len(idPrefix)+12 {
		return s[len(idPrefix) : len(idPrefix)+12]
	}
	return s
}

func bar(cur, total int64, width int) string {
	if total <= 0 {
		return "[" + strings.Repeat("?", width) + "]"
	}
	filled := int(min(cur, total) * int64(width) / total)
	return "[" + strings.Repeat("=", filled) + strings.Repeat(" ", width-filled) + "]"
}

func amount(cur, total int64) string {
	if total <= 0 {
		return humanBytes(cur)
	}
	return fmt.Sprintf("%3d%% %s/%s", min(cur, total)*100/total, humanBytes(cur), humanBytes(total))
}

// humanBytes formats n in decimal units, as registries and docker do.
func humanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %cB", v, "kMGTP"[i])
}

func remove(list []string, s string) []string {
	for i, v := range list {
		if v == s {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}
