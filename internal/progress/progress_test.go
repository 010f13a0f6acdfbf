package progress

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeClock is a clock that tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock                   { return &fakeClock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)} }
func testPrinter(w *bytes.Buffer, f Format, c *fakeClock) *Printer {
	p := New(w, f)
	p.now = c.now
	p.tickEvery = 0
	p.width = func() int { return 200 }
	return p
}

// script drives a task as a build and a pull drive theirs: steps, counted
// work within a step, a moving byte amount, notes, finished parts.
func script(p *Printer, c *fakeClock) {
	t := p.Start("build", "base")
	t.Step(1, 3, "update package lists")
	c.advance(2 * time.Second)
	t.Step(2, 3, "install packages")
	t.Amount(0, 40, "packages", "unpacked")
	c.advance(time.Second)
	t.Amount(10, 40, "packages", "unpacked") // within the interval: no line
	c.advance(5 * time.Second)
	t.Amount(30, 40, "packages", "unpacked") // the interval passed
	c.advance(time.Second)
	t.Amount(40, 40, "packages", "unpacked") // complete
	t.Amount(3, 40, "packages", "set up")    // counts something else
	t.Note(`mirror said "slow down"`)
	t.Step(3, 3, "unpack the image")
	t.Amount(1<<20, 4<<20, "bytes", "unpack")
	c.advance(2 * time.Second)
	t.Amount(3<<20, 4<<20, "bytes", "unpack")
	t.PartDone("0123456789ab", 4<<20, "")
	t.PartDone("ba9876543210", 0, "already present")
	t.Fail(errors.New("disk full"))
	t.Done("too late") // a task ends once
}

func TestPlain(t *testing.T) {
	var out bytes.Buffer
	c := newClock()
	script(testPrinter(&out, Plain, c), c)
	want := []string{
		`progress event=start op=build item=base`,
		`progress event=step op=build item=base step=1/3 name="update package lists" elapsed=0.0s`,
		`progress event=step op=build item=base step=2/3 name="install packages" elapsed=2.0s`,
		`progress event=update op=build item=base step=2/3 name="install packages" detail=unpacked packages=0/40 elapsed=2.0s`,
		`progress event=update op=build item=base step=2/3 name="install packages" detail=unpacked packages=30/40 rate=4 elapsed=8.0s`,
		`progress event=update op=build item=base step=2/3 name="install packages" detail=unpacked packages=40/40 rate=5 elapsed=9.0s`,
		`progress event=update op=build item=base step=2/3 name="install packages" detail="set up" packages=3/40 elapsed=9.0s`,
		`progress event=note op=build item=base message="mirror said \"slow down\"" elapsed=9.0s`,
		`progress event=step op=build item=base step=3/3 name="unpack the image" elapsed=9.0s`,
		`progress event=update op=build item=base step=3/3 name="unpack the image" detail=unpack bytes=1048576/4194304 elapsed=9.0s`,
		`progress event=part op=build item=base step=3/3 name="unpack the image" detail=unpack bytes=4194304 part=0123456789ab elapsed=11.0s`,
		`progress event=part op=build item=base step=3/3 name="unpack the image" detail=unpack bytes=0 part=ba9876543210 message="already present" elapsed=11.0s`,
		`progress event=failed op=build item=base step=3/3 name="unpack the image" error="disk full" elapsed=11.0s`,
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("plain lines (-want +got):\n%s", d)
	}
	if strings.ContainsAny(out.String(), "\r\x1b") {
		t.Errorf("plain output holds a carriage return or an escape: %q", out.String())
	}
	for _, l := range got {
		fields, err := ParseLine(l)
		if err != nil {
			t.Errorf("ParseLine(%q): %v", l, err)
			continue
		}
		if ev, _ := Get(fields, "event"); ev == "" {
			t.Errorf("line %q has no event", l)
		}
	}
}

func TestJSON(t *testing.T) {
	var out bytes.Buffer
	c := newClock()
	script(testPrinter(&out, JSON, c), c)
	var recs []Record
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var r Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if r.Type != RecordType {
			t.Errorf("line %q: type %q, want %q", l, r.Type, RecordType)
		}
		recs = append(recs, r)
	}
	// The same events as the Plain format's, with the same fields.
	var plain bytes.Buffer
	c = newClock()
	script(testPrinter(&plain, Plain, c), c)
	lines := strings.Split(strings.TrimSuffix(plain.String(), "\n"), "\n")
	if len(recs) != len(lines) {
		t.Fatalf("%d JSON records, %d plain lines", len(recs), len(lines))
	}
	for i, r := range recs {
		r.Type = ""
		if r.String() != lines[i] {
			t.Errorf("record %d is %q as a plain line, want %q", i, r.String(), lines[i])
		}
	}
	want := Record{Type: RecordType, Event: EventUpdate, Op: "build", Item: "base", Step: 2, Steps: 3, Name: "install packages",
		Detail: "unpacked", Unit: "packages", Current: 30, Total: 40, Rate: 4, Elapsed: 8}
	if d := cmp.Diff(want, recs[4]); d != "" {
		t.Errorf("the update at 30 of 40 packages (-want +got):\n%s", d)
	}
}

func TestTerminal(t *testing.T) {
	var out bytes.Buffer
	c := newClock()
	p := testPrinter(&out, Terminal, c)
	task := p.Start("pull", "tools:1")
	task.Amount(0, 40<<20, "bytes", "download")
	c.advance(4 * time.Second)
	out.Reset()
	task.Amount(12<<20, 40<<20, "bytes", "download")
	line := out.String()
	for _, want := range []string{"\r\x1b[K", "pull tools:1", "[======>             ]  30%", "download 12.0/40.0 MiB", "3.0 MiB/s", "4s", "ETA 9s"} {
		if !strings.Contains(line, want) {
			t.Errorf("the line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "\n") {
		t.Errorf("the line %q ends in a newline: it must be redrawn in place", line)
	}
	// Redraws come at most every drawInterval.
	out.Reset()
	task.Amount(13<<20, 40<<20, "bytes", "download")
	if out.Len() != 0 {
		t.Errorf("redrawn at once: %q", out.String())
	}
	out.Reset()
	task.PartDone("0123456789ab", 40<<20, "")
	if got := out.String(); !strings.HasPrefix(got, "\r\x1b[K  0123456789ab  downloaded 40.0 MiB\n\r\x1b[Kpull tools:1") {
		t.Errorf("a finished part prints %q, want a line above the redrawn line", got)
	}
	out.Reset()
	task.Done("sha256:abc")
	if got, want := out.String(), "\r\x1b[Kpull tools:1: sha256:abc (4s)\n"; got != want {
		t.Errorf("done prints %q, want %q", got, want)
	}

	out.Reset()
	task = p.Start("build", "base")
	task.Step(5, 11, "install packages")
	task.Fraction(0.5)
	c.advance(10 * time.Second)
	out.Reset()
	task.Amount(3, 451, "packages", "set up")
	for _, want := range []string{"build base", "[==========>         ]  50%", "[5/11] install packages", "set up 3/451 packages", "10s", "ETA 10s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the line %q lacks %q", out.String(), want)
		}
	}
	out.Reset()
	task.Fail(errors.New("boom"))
	if got, want := out.String(), "\r\x1b[Kbuild base: failed at [5/11] install packages after 10s\n"; got != want {
		t.Errorf("fail prints %q, want %q", got, want)
	}
}

func TestTerminalTruncates(t *testing.T) {
	var out bytes.Buffer
	c := newClock()
	p := testPrinter(&out, Terminal, c)
	p.width = func() int { return 40 }
	task := p.Start("build", "base")
	task.Step(1, 2, "update")
	last := func() string { return out.String()[strings.LastIndex(out.String(), "\x1b[K")+3:] }
	if got, want := last(), "build base  0%  [1/2] update  0s"; got != want {
		t.Errorf("the line is %q on a 40-cell terminal, want %q: no room for the bar", got, want)
	}
	task.Step(2, 2, "a step with a long name")
	if got, want := last(), "build base  50%  [2/2] a step with…  0s"; got != want {
		t.Errorf("the line is %q on a 40-cell terminal, want %q: the step's name cut, the time kept", got, want)
	}
}

func TestParseLine(t *testing.T) {
	tests := []struct {
		name string
		line string
		want []Field
		err  bool
	}{
		{name: "bare", line: "progress event=done op=pull elapsed=1.0s", want: []Field{{"event", "done"}, {"op", "pull"}, {"elapsed", "1.0s"}}},
		{name: "quoted", line: `progress name="a \"b\" c" x=1`, want: []Field{{"name", `a "b" c`}, {"x", "1"}}},
		{name: "empty quoted", line: `progress message=""`, want: []Field{{"message", ""}}},
		{name: "not progress", line: "build base done", err: true},
		{name: "no value", line: "progress event", err: true},
		{name: "unterminated", line: `progress name="abc`, err: true},
		{name: "glued", line: `progress name="a"b=1`, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLine(tc.line)
			if (err != nil) != tc.err {
				t.Fatalf("ParseLine(%q) = %v, %v", tc.line, got, err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("fields (-want +got):\n%s", d)
			}
		})
	}
	// Every value a Record writes parses back.
	r := Record{Event: EventNote, Op: "build", Item: "my image", Message: "tab\there, newline\nthere, = and \"quotes\"", Elapsed: 1}
	fields, err := ParseLine(r.String())
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Get(fields, "message"); msg != r.Message {
		t.Errorf("message %q came back as %q", r.Message, msg)
	}
	if item, _ := Get(fields, "item"); item != r.Item {
		t.Errorf("item %q came back as %q", r.Item, item)
	}
}

func TestPrintln(t *testing.T) {
	tests := []struct {
		format Format
		want   string
	}{
		{Plain, "I: extracting\n"},
		{JSON, `{"type":"log","message":"I: extracting"}` + "\n"},
	}
	for _, tc := range tests {
		var out bytes.Buffer
		p := testPrinter(&out, tc.format, newClock())
		w := p.Writer()
		w.Write([]byte("I: extr"))
		w.Write([]byte("acting\nI: part"))
		if got := out.String(); got != tc.want {
			t.Errorf("format %d: %q, want %q (a partial line waits for its end)", tc.format, got, tc.want)
		}
	}
}

func TestNilPrinter(t *testing.T) {
	var p *Printer
	task := p.Start("build", "base")
	task.Step(1, 2, "x")
	task.Amount(1, 2, "bytes", "")
	task.Fraction(0.5)
	task.Note("n")
	task.PartDone("p", 1, "")
	task.Done("")
	p.Println("line")
	if err := p.Close(); err != nil {
		t.Error(err)
	}
}

func TestHumanUnits(t *testing.T) {
	tests := []struct{ got, want string }{
		{humanAmount(12<<20+300<<10, 40<<20+100<<10, "bytes"), "12.3/40.1 MiB"},
		{humanAmount(500, 0, "bytes"), "500 B"},
		{humanAmount(3, 7, "runs"), "3/7 runs"},
		{humanDuration(42 * time.Second), "42s"},
		{humanDuration(125 * time.Second), "2m05s"},
		{humanDuration(3720 * time.Second), "1h02m"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
