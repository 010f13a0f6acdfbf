package progress

import (
	"fmt"
	"strings"
	"time"
)

// Task is one piece of long work shown by a Printer. Its methods are safe
// for concurrent use, and do nothing on a nil Task or once the task has
// ended.
type Task struct {
	p        *Printer
	op, item string
	start    time.Time

	step, steps int
	name        string

	detail     string
	unit       string
	cur, total int64
	// fraction is the worker's own estimate of how much is done, 0 to 1;
	// negative or zero when it gave none.
	fraction float64
	rate     rateMeter
	// lastUpdate is when the Plain and JSON formats last printed the
	// amount; complete whether they printed it complete.
	lastUpdate time.Time
	complete   bool
	ended      bool
}

// locked runs f with the Printer's lock held, unless t is nil or has
// ended.
func (t *Task) locked(f func(p *Printer)) {
	if t == nil {
		return
	}
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	if !t.ended {
		f(t.p)
	}
}

// Step moves the task on to step n of total, named name. The amount and
// its detail start afresh.
func (t *Task) Step(n, total int, name string) {
	t.locked(func(p *Printer) {
		t.step, t.steps, t.name = n, total, name
		t.detail, t.unit, t.cur, t.total = "", "", 0, 0
		t.rate.reset()
		t.complete = false
		if p.format == Terminal {
			p.draw(t, true)
			return
		}
		t.lastUpdate = p.now()
		p.emit(t.record(EventStep))
	})
}

// Amount sets how much of the task (or of its step) is done: current of
// total units (total 0: not known). unit is "bytes", or a plural noun
// ("packages", "runs"); detail says what is counted ("download",
// "unpacked"), or is empty. A new unit or detail starts the rate afresh.
func (t *Task) Amount(current, total int64, unit, detail string) {
	t.locked(func(p *Printer) {
		now := p.now()
		changed := unit != t.unit || detail != t.detail
		if changed || current < t.cur {
			t.rate.reset()
			t.complete = false
		}
		t.unit, t.detail, t.cur, t.total = unit, detail, current, total
		t.rate.add(now, current)
		if p.format == Terminal {
			p.draw(t, false)
			return
		}
		done := total > 0 && current >= total
		if changed || (done && !t.complete) || now.Sub(t.lastUpdate) >= p.interval() {
			t.lastUpdate = now
			t.complete = done
			p.emit(t.record(EventUpdate))
		}
	})
}

// Fraction sets the worker's own estimate of how much of the whole task
// is done, from 0 to 1, for the bar and the estimate of the time left.
// Without one, they come from the step and the amount.
func (t *Task) Fraction(f float64) {
	t.locked(func(*Printer) { t.fraction = min(max(f, 0), 1) })
}

// PartDone reports a finished part of the task, such as a layer: n units
// moved for it (the current unit), and a message when there is something
// to say ("already present").
func (t *Task) PartDone(part string, n int64, message string) {
	t.locked(func(p *Printer) {
		if p.format == Terminal {
			line := fmt.Sprintf("  %s  %s", part, message)
			if message == "" {
				line = fmt.Sprintf("  %s  %s %s", part, doneWord(t.detail), humanAmount(n, 0, t.unit))
			}
			p.above(line)
			return
		}
		r := t.record(EventPart)
		r.Part, r.Message = part, message
		r.Current, r.Total, r.Rate, r.ETA = n, 0, 0, 0
		p.emit(r)
	})
}

// Note reports something people may want to know about the task.
func (t *Task) Note(message string) {
	t.locked(func(p *Printer) {
		if p.format == Terminal {
			p.above("  " + message)
			return
		}
		p.emit(Record{Event: EventNote, Op: t.op, Item: t.item, Message: message, Elapsed: secondsOf(p.now().Sub(t.start))})
	})
}

// Done ends the task well. result says what came of it ("sha256:…", "20
// runs"), or is empty.
func (t *Task) Done(result string) {
	t.locked(func(p *Printer) {
		took := t.finish()
		if p.format == Terminal {
			if result == "" {
				p.above(fmt.Sprintf("%s: done in %s", t.label(), humanDuration(took)))
			} else {
				p.above(fmt.Sprintf("%s: %s (%s)", t.label(), result, humanDuration(took)))
			}
			return
		}
		r := Record{Event: EventDone, Op: t.op, Item: t.item, Result: result, Elapsed: secondsOf(took)}
		if t.unit != "" {
			r.Unit, r.Current, r.Total = t.unit, t.cur, t.total
		}
		p.emit(r)
	})
}

// Fail ends the task with err, naming the step it failed at.
func (t *Task) Fail(err error) {
	t.locked(func(p *Printer) {
		took := t.finish()
		if p.format == Terminal {
			at := ""
			if t.steps > 0 {
				at = fmt.Sprintf(" at [%d/%d] %s", t.step, t.steps, t.name)
			}
			p.above(fmt.Sprintf("%s: failed%s after %s", t.label(), at, humanDuration(took)))
			return
		}
		r := Record{Event: EventFailed, Op: t.op, Item: t.item, Step: t.step, Steps: t.steps, Name: t.name, Elapsed: secondsOf(took)}
		if err != nil {
			r.Error = err.Error()
		}
		p.emit(r)
	})
}

// finish marks t ended and returns how long it ran. p.mu must be held.
func (t *Task) finish() time.Duration {
	t.ended = true
	t.p.ended(t)
	return t.p.now().Sub(t.start)
}

// End ends the task: Done("") when err is nil, else Fail(err). It returns
// err.
func (t *Task) End(err error) error {
	if err != nil {
		t.Fail(err)
	} else {
		t.Done("")
	}
	return err
}

// record returns the task's state as a Record of event ev. p.mu must be
// held.
func (t *Task) record(ev string) Record {
	if ev == EventStart {
		return Record{Event: ev, Op: t.op, Item: t.item}
	}
	now := t.p.now()
	r := Record{
		Event: ev, Op: t.op, Item: t.item, Step: t.step, Steps: t.steps, Name: t.name,
		Detail: t.detail, Unit: t.unit, Current: t.cur, Total: t.total,
		Elapsed: secondsOf(now.Sub(t.start)),
	}
	if rate, ok := t.rate.perSecond(); ok && t.unit != "" {
		r.Rate = rate
	}
	if eta, ok := t.eta(now); ok {
		r.ETA = secondsOf(eta)
	}
	return r
}

func (t *Task) label() string {
	if t.item == "" {
		return t.op
	}
	return t.op + " " + t.item
}

// done returns how much of the whole task is done, 0 to 1, and whether
// that can be told: the worker's Fraction, else the amount of a task
// without steps, else the steps behind it (and the amount of this one).
func (t *Task) done() (float64, bool) {
	switch {
	case t.fraction > 0:
		return t.fraction, true
	case t.steps > 0:
		f := float64(t.step-1) / float64(t.steps)
		if t.total > 0 {
			f += min(float64(t.cur)/float64(t.total), 1) / float64(t.steps)
		}
		return max(f, 0), true
	case t.total > 0:
		return min(float64(t.cur)/float64(t.total), 1), true
	}
	return 0, false
}

// Estimates of the time left need this much of the task behind them.
const (
	minEstimateTime     = 3 * time.Second
	minEstimateFraction = 0.02
)

// eta estimates the time left: from the worker's Fraction and the time so
// far, or, for a task with no steps to come, from the amount left and its
// rate.
func (t *Task) eta(now time.Time) (time.Duration, bool) {
	elapsed := now.Sub(t.start)
	if elapsed < minEstimateTime {
		return 0, false
	}
	if t.fraction >= minEstimateFraction && t.fraction < 1 {
		return time.Duration(float64(elapsed) * (1 - t.fraction) / t.fraction), true
	}
	if t.fraction > 0 || t.total <= 0 || t.step < t.steps {
		return 0, false
	}
	rate, ok := t.rate.perSecond()
	if !ok || rate <= 0 {
		return 0, false
	}
	left := max(t.total-t.cur, 0)
	return time.Duration(float64(left) / rate * float64(time.Second)), true
}

// barWidth is the bar's length in cells, between its brackets.
const barWidth = 20

// line renders the task for the Terminal's line, at most width cells (none:
// no limit). What gives way to a narrow terminal, in turn: the bar (its
// percentage stays), then the end of the step and amount; the label, the
// rate and the times stay as long as they fit.
func (t *Task) line(now time.Time, width int) string {
	middle, tail := t.status(now)
	head := t.label()
	f, ok := t.done()
	if ok {
		filled := int(f * barWidth)
		bar := strings.Repeat("=", filled)
		if filled < barWidth {
			bar += ">" + strings.Repeat(" ", barWidth-filled-1)
		}
		pct := fmt.Sprintf("%d%%", int(f*100))
		if line := join(head, fmt.Sprintf("[%s] %4s", bar, pct), middle, tail); width <= 0 || runes(line) <= width {
			return line
		}
		head = join(head, pct)
	}
	if room := width - runes(join(head, tail)) - 2; middle != "" && room < runes(middle) {
		if room < 8 {
			middle = ""
		} else {
			middle = truncate(middle, room)
		}
	}
	return truncate(join(head, middle, tail), width)
}

// status renders what the Terminal's line says after the label and bar:
// the step and the amount, then the rate, the time so far and the time
// left.
func (t *Task) status(now time.Time) (middle, tail string) {
	var parts, times []string
	if t.steps > 0 {
		parts = append(parts, fmt.Sprintf("[%d/%d] %s", t.step, t.steps, t.name))
	}
	if t.unit != "" {
		amount := humanAmount(t.cur, t.total, t.unit)
		if t.detail != "" {
			amount = t.detail + " " + amount
		}
		parts = append(parts, amount)
		if rate, ok := t.rate.perSecond(); ok && t.unit == "bytes" {
			times = append(times, humanBytes(int64(rate))+"/s")
		}
	}
	times = append(times, humanDuration(now.Sub(t.start)))
	if eta, ok := t.eta(now); ok {
		times = append(times, "ETA "+humanDuration(eta))
	}
	return join(parts...), join(times...)
}

// join joins the parts of a line that are not empty, two spaces apart.
func join(parts ...string) string {
	kept := parts[:0:0]
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "  ")
}

func runes(s string) int { return len([]rune(s)) }

// doneWord is what PartDone's line says was done to a part counted under
// detail.
func doneWord(detail string) string {
	switch detail {
	case "":
		return "done"
	case "download":
		return "downloaded"
	case "unpack":
		return "unpacked"
	}
	return detail
}
