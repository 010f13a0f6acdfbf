package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestWarmTracker: the tracker notes what each create's answer says of its
// sandbox and hands the answer on unchanged.
func TestWarmTracker(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/sandboxes" && r.URL.Query().Get("fail") != "":
			http.Error(w, `{"sandboxID":"failed","warm":true}`, http.StatusTooManyRequests)
		case r.Method == http.MethodPost && r.URL.Path == "/sandboxes":
			body, _ := io.ReadAll(r.Body)
			w.WriteHeader(http.StatusCreated)
			w.Write(body) // the test says what the daemon answers
		default:
			w.Write([]byte(`{"sandboxID":"listed","warm":true}`))
		}
	}))
	defer srv.Close()
	wt := &WarmTracker{}
	c := &http.Client{Transport: wt}
	post := func(query, body string) string {
		t.Helper()
		resp, err := c.Post(srv.URL+"/sandboxes"+query, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(got)
	}
	for _, body := range []string{`{"sandboxID":"hot","warm":true}`, `{"sandboxID":"cold"}`} {
		if got := post("", body); got != body {
			t.Errorf("the create's answer reached the client as %q, want %q", got, body)
		}
	}
	post("?fail=1", "")
	if resp, err := c.Get(srv.URL + "/sandboxes"); err == nil {
		resp.Body.Close()
	}
	for id, want := range map[string]bool{"hot": true, "cold": false, "failed": false, "listed": false, "unknown": false} {
		if got := wt.Warm(id); got != want {
			t.Errorf("Warm(%q) = %v, want %v", id, got, want)
		}
	}
}
