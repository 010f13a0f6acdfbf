package progress

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The events of a Record.
const (
	EventStart  = "start"  // a task began
	EventStep   = "step"   // a task moved on to its next step
	EventUpdate = "update" // a task's amount moved
	EventPart   = "part"   // a part of a task (a layer) is finished
	EventNote   = "note"   // something people may want to know
	EventDone   = "done"   // a task ended well
	EventFailed = "failed" // a task ended in failure
)

// Record is one line of progress of the Plain and JSON formats.
//
// In the Plain format it is the word "progress" followed by key=value
// fields in this order, each present only when set: event, op, item, step
// (as "n/total"), name, detail, the amount (keyed by its unit, as
// "bytes=current/total", or "bytes=current" when the total is unknown),
// rate (units a second, a whole number), eta, part, message, result,
// error, elapsed. Durations are seconds with one decimal and an "s"
// ("12.3s"). A value is bare when it holds only letters, digits and
// _./:@+-, and otherwise double-quoted with Go's (and C's) escapes. In the
// JSON format it is the object below, whose "type" is always "progress".
type Record struct {
	Type  string `json:"type"`
	Event string `json:"event"`
	Op    string `json:"op"`
	Item  string `json:"item,omitempty"`
	// Step is the number, from 1, of the task's step of Steps; Name names
	// it.
	Step  int    `json:"step,omitempty"`
	Steps int    `json:"steps,omitempty"`
	Name  string `json:"name,omitempty"`
	// Detail says what the amount counts within the step ("unpacked").
	Detail string `json:"detail,omitempty"`
	// Unit is what Current and Total count: "bytes", or a plural noun
	// ("packages", "runs"). Total is 0 when it is not known.
	Unit    string `json:"unit,omitempty"`
	Current int64  `json:"current,omitempty"`
	Total   int64  `json:"total,omitempty"`
	// Rate is units a second, when measured.
	Rate float64 `json:"rate,omitempty"`
	// ETA is an estimate of the seconds left, when one can be made.
	ETA     float64 `json:"eta,omitempty"`
	Part    string  `json:"part,omitempty"`
	Message string  `json:"message,omitempty"`
	Result  string  `json:"result,omitempty"`
	Error   string  `json:"error,omitempty"`
	// Elapsed is the seconds since the task started.
	Elapsed float64 `json:"elapsed"`
}

// RecordType is the Type of every Record, and the first word of every
// line of the Plain format.
const RecordType = "progress"

// bareValue matches the values the Plain format writes without quotes.
var bareValue = regexp.MustCompile(`^[A-Za-z0-9_./:@+\-]+$`)

// String returns r in the Plain format, without a newline.
func (r Record) String() string {
	var b strings.Builder
	b.WriteString(RecordType)
	field := func(k, v string) {
		b.WriteByte(' ')
		b.WriteString(k)
		b.WriteByte('=')
		if bareValue.MatchString(v) {
			b.WriteString(v)
		} else {
			b.WriteString(strconv.Quote(v))
		}
	}
	opt := func(k, v string) {
		if v != "" {
			field(k, v)
		}
	}
	field("event", r.Event)
	field("op", r.Op)
	opt("item", r.Item)
	if r.Steps > 0 {
		field("step", fmt.Sprintf("%d/%d", r.Step, r.Steps))
	}
	opt("name", r.Name)
	opt("detail", r.Detail)
	if r.Unit != "" {
		amount := strconv.FormatInt(r.Current, 10)
		if r.Total > 0 {
			amount += "/" + strconv.FormatInt(r.Total, 10)
		}
		field(r.Unit, amount)
	}
	if r.Rate > 0 {
		field("rate", strconv.FormatFloat(r.Rate, 'f', 0, 64))
	}
	if r.ETA > 0 {
		field("eta", seconds(r.ETA))
	}
	opt("part", r.Part)
	opt("message", r.Message)
	opt("result", r.Result)
	opt("error", r.Error)
	if r.Event != EventStart {
		field("elapsed", seconds(r.Elapsed))
	}
	return b.String()
}

// seconds formats s seconds as the Plain format writes durations.
func seconds(s float64) string {
	return strconv.FormatFloat(s, 'f', 1, 64) + "s"
}

// secondsOf returns d in seconds, rounded to the tenth the Plain format
// keeps, so that both formats say the same.
func secondsOf(d time.Duration) float64 {
	return d.Round(100 * time.Millisecond).Seconds()
}

// ErrNotProgress is returned by ParseLine for a line that is not one of
// progress.
var ErrNotProgress = errors.New("not a progress line")

// ParseLine splits a line of the Plain format into its fields, in order.
// A line that does not start with "progress " fails with ErrNotProgress.
func ParseLine(line string) ([]Field, error) {
	rest, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), RecordType+" ")
	if !ok {
		return nil, ErrNotProgress
	}
	var out []Field
	for rest != "" {
		k, v, ok := strings.Cut(rest, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \"") {
			return nil, fmt.Errorf("progress line %q: a field without a key=value form at %q", line, rest)
		}
		rest = v
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return nil, fmt.Errorf("progress line %q: field %s: %w", line, k, err)
			}
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else if i := strings.IndexByte(rest, ' '); i >= 0 {
			v, rest = rest[:i], rest[i:]
		} else {
			v, rest = rest, ""
		}
		out = append(out, Field{Key: k, Value: v})
		if rest != "" {
			var ok bool
			if rest, ok = strings.CutPrefix(rest, " "); !ok {
				return nil, fmt.Errorf("progress line %q: no space after field %s", line, k)
			}
		}
	}
	return out, nil
}

// Field is one key=value of a line of the Plain format.
type Field struct {
	Key, Value string
}

// Get returns the value of the first field named key, and whether there
// is one.
func Get(fields []Field, key string) (string, bool) {
	for _, f := range fields {
		if f.Key == key {
			return f.Value, true
		}
	}
	return "", false
}
