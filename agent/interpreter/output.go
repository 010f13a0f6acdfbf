package interpreter

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"
)

// mimeKeys maps the MIME types of a Jupyter display bundle to the keys of
// E2B's result objects. Other types keep their MIME type as key; the
// SDKs put them in Result.extra.
var mimeKeys = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	// What the Python kernel's own formatter adds (kernels/python_setup.py).
	chartMIME: "chart",
}

// chartMIME is the MIME type of the Python kernel's chart formatter.
const chartMIME = "application/vnd.tupper.chart+json"

// ndjson writes one execution's output as E2B's code interpreter does: a
// JSON object per line, flushed as it comes. Writes after the client went
// away are dropped. It is safe for concurrent use: a kernel may relay
// output from several goroutines.
type ndjson struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	flusher http.Flusher
	enc     *json.Encoder
	broken  bool
}

func newNDJSON(w http.ResponseWriter) *ndjson {
	f, _ := w.(http.Flusher)
	return &ndjson{w: w, flusher: f, enc: json.NewEncoder(w)}
}

func (o *ndjson) write(v any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.broken {
		return
	}
	if err := o.enc.Encode(v); err != nil {
		o.broken = true
		return
	}
	if o.flusher != nil {
		o.flusher.Flush()
	}
}

func (o *ndjson) stream(name, text string) {
	if name != "stderr" {
		name = "stdout"
	}
	o.write(map[string]any{"type": name, "text": text, "timestamp": time.Now().UTC().Format(time.RFC3339Nano)})
}

func (o *ndjson) result(data map[string]any, main bool) {
	msg := map[string]any{"type": "result", "is_main_result": main}
	for mime, v := range data {
		key, ok := mimeKeys[mime]
		if !ok {
			key = mime
		}
		msg[key] = v
	}
	o.write(msg)
}

func (o *ndjson) fail(name, value, traceback string) {
	o.write(map[string]any{"type": "error", "name": name, "value": value, "traceback": traceback})
}

func (o *ndjson) count(n int) {
	o.write(map[string]any{"type": "number_of_executions", "execution_count": n})
}

func (o *ndjson) end() {
	o.write(map[string]any{"type": "end_of_execution"})
}

// splitUTF8 splits b before an unfinished UTF-8 sequence at its end, so
// that a character cut between two reads is sent whole with the next.
func splitUTF8(b []byte) (complete, rest []byte) {
	for i := 1; i <= min(utf8.UTFMax-1, len(b)); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			break // ASCII: nothing unfinished
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i], append([]byte(nil), b[len(b)-i:]...)
			}
			break
		}
	}
	return b, nil
}
