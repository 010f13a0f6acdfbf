package engine

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
)

// TestDialCutAtKill checks that a request streaming from a sandbox ends
// when the sandbox is killed, even when the sandbox's end of the
// connection never closes (here: the backend's stop fails, so the
// stand-in agent keeps the stream open), and that a killed sandbox cannot
// be dialed.
func TestDialCutAtKill(t *testing.T) {
	ctx := context.Background()
	b := backendtest.NewFake()
	b.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	e := newEngineOn(t, b, func(c *Config) { c.StopRetry = time.Hour })
	sb, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: e.DialContext}}
	resp, err := client.Get("http://" + SandboxAddr(sb.ID, backend.AgentPort) + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		ended <- err
	}()
	b.FailStops(1, errors.New("busy"))
	if err := e.Kill(ctx, sb.ID); err == nil {
		t.Fatal("kill with a failing stop answered success")
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream to a killed sandbox is still open")
	}
	if _, err := e.Dial(ctx, sb.ID, backend.AgentPort); err == nil {
		// The failed stop put the sandbox back: it is live until the
		// retry, and dialable; a sandbox really gone is not.
		b.FailStops(0, nil)
		if err := e.Kill(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Dial(ctx, sb.ID, backend.AgentPort); !errdefs.IsNotFound(err) {
		t.Errorf("dial of a killed sandbox: %v, want not found", err)
	}
	if _, err := e.DialContext(ctx, "tcp", "127.0.0.1:49983"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("dial of an address that names no sandbox: %v, want invalid argument", err)
	}
}
