package sdk

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// Execution is what a cell of code did: its results, its output and the
// error it ended with. Its JSON form uses the field names of E2B's code
// interpreter, with images and PDFs in base64.
type Execution struct {
	// Results are the cell's rich results in the order they came: what
	// it displayed (a plot, display(...)) and, marked IsMainResult, the
	// value of its last expression.
	Results []Result `json:"results"`
	// Logs hold what the cell printed, a chunk per message.
	Logs Logs `json:"logs"`
	// Error is the error the cell ended with; nil when it ran through.
	Error *ExecutionError `json:"error,omitempty"`
	// ExecutionCount numbers the cell among those its context ran
	// (Python's In [n]); 0 when the language keeps no count.
	ExecutionCount int `json:"execution_count,omitempty"`
}

// Logs is what a cell wrote to standard output and standard error, as the
// chunks arrived.
type Logs struct {
	Stdout []string `json:"stdout"`
	Stderr []string `json:"stderr"`
}

// ExecutionError is the error a cell ended with: a Python exception, a
// JavaScript throw, a bash command's failure, or the interpreter's own
// (ContextRestarting when the context was restarted under it, KernelDied,
// TimeoutError). It is an error, so that callers can return it.
type ExecutionError struct {
	// Name is the error's type, such as ZeroDivisionError.
	Name string `json:"name"`
	// Value is its message.
	Value string `json:"value"`
	// Traceback is the whole traceback as the language prints it.
	Traceback string `json:"traceback"`
}

func (e *ExecutionError) Error() string {
	if e.Value == "" {
		return e.Name
	}
	return e.Name + ": " + e.Value
}

// Result is one rich result of a cell, in every format the language
// rendered it in (a DataFrame has Text and HTML; a plot PNG and Text).
type Result struct {
	Text       string `json:"text,omitempty"`
	HTML       string `json:"html,omitempty"`
	Markdown   string `json:"markdown,omitempty"`
	SVG        string `json:"svg,omitempty"`
	PNG        []byte `json:"png,omitempty"`
	JPEG       []byte `json:"jpeg,omitempty"`
	PDF        []byte `json:"pdf,omitempty"`
	LaTeX      string `json:"latex,omitempty"`
	JavaScript string `json:"javascript,omitempty"`
	// JSON is an application/json result as it came.
	JSON json.RawMessage `json:"json,omitempty"`
	// Data is a table's data, as E2B's interpreter reports it.
	Data json.RawMessage `json:"data,omitempty"`
	// Chart describes a plot's content, as E2B's interpreter reports it:
	// {"type": "line"|"scatter"|"bar"|"pie"|…, "title", "elements", …}.
	Chart json.RawMessage `json:"chart,omitempty"`
	// IsMainResult marks the value of the cell's last expression, as
	// opposed to what it displayed on the way.
	IsMainResult bool `json:"is_main_result"`
	// Extra holds the formats this SDK does not name, by their key on
	// the wire (a MIME type), and any of the binary formats that did not
	// decode, as they came.
	Extra map[string]any `json:"extra,omitempty"`
}

// Formats returns the names of the formats the result has, in the order
// of Result's fields, then the keys of Extra in sorted order.
func (r *Result) Formats() []string {
	var out []string
	for _, f := range []struct {
		name string
		has  bool
	}{
		{"text", r.Text != ""}, {"html", r.HTML != ""}, {"markdown", r.Markdown != ""}, {"svg", r.SVG != ""},
		{"png", len(r.PNG) > 0}, {"jpeg", len(r.JPEG) > 0}, {"pdf", len(r.PDF) > 0}, {"latex", r.LaTeX != ""},
		{"javascript", r.JavaScript != ""}, {"json", len(r.JSON) > 0}, {"data", len(r.Data) > 0}, {"chart", len(r.Chart) > 0},
	} {
		if f.has {
			out = append(out, f.name)
		}
	}
	return append(out, slices.Sorted(maps.Keys(r.Extra))...)
}

// MainResult returns the value of the cell's last expression, or nil when
// it had none (a statement, an error, a print).
func (e *Execution) MainResult() *Result {
	for i := range e.Results {
		if e.Results[i].IsMainResult {
			return &e.Results[i]
		}
	}
	return nil
}

// Text returns the text of the main result ("42" for a cell ending in
// 6*7), or "" when there is none.
func (e *Execution) Text() string {
	if r := e.MainResult(); r != nil {
		return r.Text
	}
	return ""
}

// parseResult reads a result line of the interpreter: the known keys into
// their fields, the others into Extra.
func parseResult(line map[string]json.RawMessage) Result {
	var r Result
	str := func(v json.RawMessage) (string, bool) {
		var s string
		return s, json.Unmarshal(v, &s) == nil
	}
	extra := func(k string, v json.RawMessage) {
		var x any
		if json.Unmarshal(v, &x) != nil {
			return
		}
		if r.Extra == nil {
			r.Extra = map[string]any{}
		}
		r.Extra[k] = x
	}
	texts := map[string]*string{
		"text": &r.Text, "html": &r.HTML, "markdown": &r.Markdown,
		"svg": &r.SVG, "latex": &r.LaTeX, "javascript": &r.JavaScript,
	}
	bins := map[string]*[]byte{"png": &r.PNG, "jpeg": &r.JPEG, "pdf": &r.PDF}
	raws := map[string]*json.RawMessage{"json": &r.JSON, "data": &r.Data, "chart": &r.Chart}
	for k, v := range line {
		if k == "type" {
			continue
		}
		if k == "is_main_result" {
			_ = json.Unmarshal(v, &r.IsMainResult)
			continue
		}
		if raw, ok := raws[k]; ok {
			*raw = v
			continue
		}
		text, isText := texts[k]
		bin, isBin := bins[k]
		s, isString := str(v)
		switch {
		case !isText && !isBin, !isString:
			extra(k, v)
		case isText:
			*text = s
		default:
			b, err := decodeBase64(s)
			if err != nil {
				extra(k, v)
				continue
			}
			*bin = b
		}
	}
	return r
}

// decodeBase64 decodes a Jupyter binary format: standard base64, which
// some kernels wrap in lines.
func decodeBase64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' {
			return -1
		}
		return r
	}, s)
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
}
