package sdk

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
)

// TestParseResult covers what the real interpreter rarely sends: formats
// this SDK does not name, binary formats wrapped in lines or that do not
// decode, values of an unexpected type.
func TestParseResult(t *testing.T) {
	tests := []struct {
		name string
		line string
		want Result
	}{
		{
			name: "known formats",
			line: `{"type":"result","is_main_result":true,"text":"x","html":"<b>x</b>","png":"iVBORw==","json":{"a":[1,2]},"chart":{"type":"bar"},"data":{"c":1}}`,
			want: Result{Text: "x", HTML: "<b>x</b>", PNG: []byte("\x89PNG"), JSON: json.RawMessage(`{"a":[1,2]}`),
				Chart: json.RawMessage(`{"type":"bar"}`), Data: json.RawMessage(`{"c":1}`), IsMainResult: true},
		},
		{
			name: "base64 wrapped in lines",
			line: `{"type":"result","jpeg":"/9j/\n4AAQ\n","pdf":"JVBERi0="}`,
			want: Result{JPEG: []byte("\xff\xd8\xff\xe0\x00\x10"), PDF: []byte("%PDF-")},
		},
		{
			name: "other MIME types and bad values go to Extra",
			line: `{"type":"result","application/vnd.custom+json":{"k":"v"},"png":"not base64!","text":5}`,
			want: Result{Extra: map[string]any{"application/vnd.custom+json": map[string]any{"k": "v"}, "png": "not base64!", "text": float64(5)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var line map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tt.line), &line); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, parseResult(line)); d != "" {
				t.Errorf("parseResult (-want +got):\n%s", d)
			}
		})
	}
}

func TestReadExecution(t *testing.T) {
	var order []string
	o := &codeOptions{
		onStdout: func(s string) { order = append(order, "out:"+s) },
		onStderr: func(s string) { order = append(order, "err:"+s) },
		onResult: func(r Result) { order = append(order, "result:"+r.Text) },
		onError:  func(e ExecutionError) { order = append(order, "error:"+e.Name) },
	}
	answer := `{"type":"number_of_executions","execution_count":3}
{"type":"stdout","text":"a\n","timestamp":"t"}
{"type":"some_future_type","x":1}
{"type":"result","is_main_result":false,"text":"shown"}
{"type":"stderr","text":"b\n","timestamp":"t"}
{"type":"error","name":"ValueError","value":"bad","traceback":"tb"}
{"type":"end_of_execution"}
`
	var exec Execution
	if err := readExecution(strings.NewReader(answer), &exec, o); err != nil {
		t.Fatal(err)
	}
	want := Execution{
		Results:        []Result{{Text: "shown"}},
		Logs:           Logs{Stdout: []string{"a\n"}, Stderr: []string{"b\n"}},
		Error:          &ExecutionError{Name: "ValueError", Value: "bad", Traceback: "tb"},
		ExecutionCount: 3,
	}
	if d := cmp.Diff(want, exec); d != "" {
		t.Errorf("execution (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"out:a\n", "result:shown", "err:b\n", "error:ValueError"}, order); d != "" {
		t.Errorf("callbacks (-want +got):\n%s", d)
	}

	for name, cut := range map[string]string{
		"no end":   `{"type":"stdout","text":"a"}` + "\n",
		"cut line": `{"type":"stdout","te`,
		"not JSON": "<html>proxy error</html>\n",
	} {
		err := readExecution(strings.NewReader(cut), &Execution{}, &codeOptions{})
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("%s: %v, want unavailable", name, err)
		}
	}
}
