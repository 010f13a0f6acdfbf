package bench

import "github.com/lightbearco/tupper/internal/progress"

// Progress shows how far a bench has come: each figure is a task of
// Printer, counted in runs (a bar redrawn in place on a terminal, else
// lines for scripts). Its zero value shows nothing. It is used from one
// goroutine.
type Progress struct {
	// Printer shows the progress; nil shows nothing.
	Printer *progress.Printer

	task        *progress.Task
	done, total int
}

// Start begins a figure of total runs.
func (p *Progress) Start(what string, total int) {
	p.task = p.Printer.Start("bench", what)
	p.done, p.total = 0, total
	p.task.Amount(0, int64(total), "runs", "")
}

// Step counts one run done.
func (p *Progress) Step() {
	p.done++
	p.task.Amount(int64(p.done), int64(p.total), "runs", "")
}

// End finishes the figure with a one-line outcome.
func (p *Progress) End(outcome string) {
	p.task.Done(outcome)
}
