package process

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// envelope is one Connect streaming frame.
type envelope struct {
	flags byte
	body  string
}

func readEnvelopes(t *testing.T, r io.Reader) []envelope {
	t.Helper()
	br := bufio.NewReader(r)
	var out []envelope
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(br, hdr[:]); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("envelope header: %v", err)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatalf("envelope body: %v", err)
		}
		out = append(out, envelope{flags: hdr[0], body: string(body)})
	}
}

// TestJSONWire speaks to the service the way the E2B SDKs do, byte for
// byte: Connect protocol, JSON encoding, HTTP/1.1.
func TestJSONWire(t *testing.T) {
	e := newTestEnv(t)

	t.Run("Start stream", func(t *testing.T) {
		msg := `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi; echo oops >&2; exit 3"],"envs":{"A":"b"}},"stdin":false}`
		var frame bytes.Buffer
		frame.WriteByte(0)
		_ = binary.Write(&frame, binary.BigEndian, uint32(len(msg)))
		frame.WriteString(msg)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+"/process.Process/Start", &frame)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/connect+json")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("Connect-Timeout-Ms", "60000")
		req.Header.Set("Keepalive-Ping-Interval", "50")
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/connect+json" {
			t.Fatalf("status %d, content type %q", res.StatusCode, res.Header.Get("Content-Type"))
		}
		envs := readEnvelopes(t, res.Body)
		if len(envs) < 4 {
			t.Fatalf("got %d envelopes, want start, data..., end, end-of-stream: %q", len(envs), envs)
		}

		type event struct {
			Start *struct {
				Pid uint32 `json:"pid"`
			} `json:"start"`
			Data *struct {
				Stdout []byte `json:"stdout"`
				Stderr []byte `json:"stderr"`
			} `json:"data"`
			End *json.RawMessage `json:"end"`
		}
		var events []event
		for _, env := range envs[:len(envs)-1] {
			if env.flags != 0 {
				t.Fatalf("message envelope flags %#x in %q", env.flags, env.body)
			}
			var m struct {
				Event event `json:"event"`
			}
			if err := json.Unmarshal([]byte(env.body), &m); err != nil {
				t.Fatalf("%q: %v", env.body, err)
			}
			events = append(events, m.Event)
		}
		if events[0].Start == nil || events[0].Start.Pid == 0 {
			t.Errorf("first envelope %q, want start with a pid", envs[0].body)
		}
		var stdout, stderr bytes.Buffer
		for _, ev := range events[1 : len(events)-1] {
			if ev.Data == nil {
				t.Fatalf("middle envelope is not data: %+v", ev)
			}
			stdout.Write(ev.Data.Stdout)
			stderr.Write(ev.Data.Stderr)
		}
		if stdout.String() != "hi\n" || stderr.String() != "oops\n" {
			t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
		}
		last := events[len(events)-1].End
		if last == nil {
			t.Fatalf("last message envelope %q is not end", envs[len(envs)-2].body)
		}
		var end map[string]any
		if err := json.Unmarshal(*last, &end); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"exitCode": 3.0, "exited": true, "status": "exit status 3", "error": "exit status 3"}
		if diff := cmp.Diff(want, end); diff != "" {
			t.Errorf("end JSON (-want +got):\n%s", diff)
		}
		eos := envs[len(envs)-1]
		if eos.flags != 0x02 || strings.TrimSpace(eos.body) != "{}" {
			t.Errorf("end-of-stream envelope: flags %#x body %q, want 0x02 {}", eos.flags, eos.body)
		}
	})

	t.Run("unary error", func(t *testing.T) {
		body := strings.NewReader(`{"process":{"pid":4194311},"signal":"SIGNAL_SIGKILL"}`)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+"/process.Process/SendSignal", body)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var got struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusNotFound || got.Code != "not_found" || got.Message == "" {
			t.Errorf("status %d, body %+v; want 404 not_found", res.StatusCode, got)
		}
	})

	t.Run("unary List", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+"/process.Process/List", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK || !json.Valid(b) {
			t.Errorf("status %d body %q", res.StatusCode, b)
		}
	})
}
