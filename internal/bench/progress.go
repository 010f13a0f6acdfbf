package bench

import (
	"fmt"
	"io"
	"strings"
)

// Progress shows how far a bench has come: a bar redrawn in place on a
// terminal, else one line as each figure starts and ends. Its zero value
// shows nothing. It is used from one goroutine.
type Progress struct {
	// W receives the progress; nil shows nothing.
	W io.Writer
	// Terminal draws a bar in place instead of plain lines.
	Terminal bool

	what        string
	done, total int
}

// Start begins a step of total units.
func (p *Progress) Start(what string, total int) {
	p.what, p.done, p.total = what, 0, total
	if p.W == nil {
		return
	}
	if p.Terminal {
		p.draw()
		return
	}
	if total == 1 {
		fmt.Fprintf(p.W, "%s…\n", what)
		return
	}
	fmt.Fprintf(p.W, "%s: %d runs…\n", what, total)
}

// Step counts one unit done.
func (p *Progress) Step() {
	p.done++
	if p.W != nil && p.Terminal {
		p.draw()
	}
}

// End finishes the step with a one-line outcome.
func (p *Progress) End(outcome string) {
	if p.W == nil {
		return
	}
	if p.Terminal {
		fmt.Fprint(p.W, "\r\033[K")
	}
	fmt.Fprintf(p.W, "%s: %s\n", p.what, outcome)
}

// barWidth is the bar's length in cells.
const barWidth = 30

func (p *Progress) draw() {
	filled := 0
	if p.total > 0 {
		filled = min(barWidth, p.done*barWidth/p.total)
	}
	fmt.Fprintf(p.W, "\r\033[K[%s%s] %d/%d %s", strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled), p.done, p.total, p.what)
}
