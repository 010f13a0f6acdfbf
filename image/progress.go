package image

import (
	"io"
	"sync"
)

// Phase names a step of an image operation.
type Phase string

const (
	// PhaseResolve is looking up a reference, reading an archive's index or
	// checking what the store already holds. Events carry a Message.
	PhaseResolve Phase = "resolve"
	// PhaseDownload is fetching a blob (or copying it out of an archive) into
	// the store. Item is the blob's digest; Current and Total count its bytes.
	PhaseDownload Phase = "download"
	// PhaseRead is reading an archive given to Import. Item names the archive.
	PhaseRead Phase = "read"
	// PhaseBuild is a builder at work. Each event carries one line of the
	// builder's output in Message.
	PhaseBuild Phase = "build"
	// PhaseUnpack is applying a layer to a root filesystem. Item is the layer's
	// digest; Current and Total count the bytes of the stored blob read so far.
	PhaseUnpack Phase = "unpack"
	// PhaseStep is a builder moving on to its next step. Item is the image;
	// Current is the step's number, from 1, and Total how many steps there
	// are; Message names the step.
	PhaseStep Phase = "step"
	// PhasePackages counts the Debian packages the current step of a build
	// has handled: Current of Total, with Message saying what was done to
	// them ("fetched", "unpacked", "set up").
	PhasePackages Phase = "packages"
	// PhaseDone reports a finished image: Item is its name, Message its id.
	PhaseDone Phase = "done"
)

// Event is one report of progress.
//
// An event is about one Item of one Phase. Byte counts grow with each event
// for the same item; Total is 0 when the size is not known in advance. Done
// marks the last event for the item. Message, when set, is a line meant for
// people ("already present", a builder's output).
//
// An operation announces the blobs it is about to copy and the layers it
// is about to unpack with an event each at Current 0, before it starts on
// the first, so that the sum of their Totals is known from the start.
type Event struct {
	Phase   Phase
	Item    string
	Current int64
	Total   int64
	Done    bool
	Message string
	// Fraction, on PhaseStep and PhasePackages events, is the builder's
	// estimate of how much of the whole build is done, from 0 to 1, by the
	// shares of the time its steps usually take.
	Fraction float64
}

// Progress receives events while an image operation runs.
//
// The store never calls Event concurrently for one operation, so an
// implementation need not lock unless it is shared between operations that
// run at the same time. Event must not block for long: it runs on the path
// that moves the bytes.
type Progress interface {
	Event(Event)
}

// ProgressFunc adapts a function to Progress.
type ProgressFunc func(Event)

// Event calls f(e).
func (f ProgressFunc) Event(e Event) { f(e) }

// reporter serializes events from the goroutines of one operation and turns a
// nil Progress into a no-op.
type reporter struct {
	mu sync.Mutex
	p  Progress
}

func newReporter(p Progress) *reporter { return &reporter{p: p} }

func (r *reporter) event(e Event) {
	if r == nil || r.p == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p.Event(e)
}

func (r *reporter) message(phase Phase, item, msg string) {
	r.event(Event{Phase: phase, Item: item, Message: msg})
}

// byteStep is how many bytes pass between two progress events for one item.
const byteStep = 1 << 20

// countingReader reports the bytes read through it, at most every byteStep
// bytes, and once more when the reader is exhausted.
type countingReader struct {
	r       io.Reader
	rep     *reporter
	phase   Phase
	item    string
	total   int64
	n       int64
	last    int64
	stopped bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n-c.last >= byteStep {
		c.last = c.n
		c.rep.event(Event{Phase: c.phase, Item: c.item, Current: c.n, Total: c.total})
	}
	return n, err
}

// done sends the final event for the item.
func (c *countingReader) done() {
	if c.stopped {
		return
	}
	c.stopped = true
	total := c.total
	if total == 0 {
		total = c.n
	}
	c.rep.event(Event{Phase: c.phase, Item: c.item, Current: c.n, Total: total, Done: true})
}
