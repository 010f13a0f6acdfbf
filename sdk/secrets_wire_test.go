package sdk_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// TestSecretsWire checks what the HTTP transport sends for E2B's secret
// routes and how it reads the answers, against a fake control plane;
// secrets_remote_test.go runs the same calls against the real server.
func TestSecretsWire(t *testing.T) {
	at := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	secret := map[string]any{"secretID": "sec_1", "name": "openai", "currentVersion": 2, "metadata": map[string]string{"o": "p"}, "createdAt": at, "updatedAt": at.Add(time.Hour)}
	f, tr := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method + " " + r.URL.EscapedPath() {
		case "POST /secrets":
			writeJSON(w, http.StatusCreated, secret)
		case "POST /secrets/openai", "GET /secrets/sec_1":
			writeJSON(w, http.StatusOK, secret)
		case "GET /secrets":
			w.Header().Set("X-Next-Token", "n2")
			writeJSON(w, http.StatusOK, []any{secret})
		case "DELETE /secrets/sec_1":
			w.WriteHeader(http.StatusNoContent)
		default:
			writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "secret \"x\": not found"})
		}
	})
	c := &sdk.Client{Transport: tr}
	ctx := context.Background()
	want := &sdk.SecretInfo{SecretID: "sec_1", Name: "openai", Version: 2, Metadata: map[string]string{"o": "p"}, CreatedAt: at, UpdatedAt: at.Add(time.Hour)}

	got, err := c.CreateSecret(ctx, "OpenAI", "sk-1", map[string]string{"o": "p"})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("create (-want +got):\n%s", d)
	}
	if _, err := c.UpdateSecret(ctx, "openai", "sk-2", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSecret(ctx, "sec_1"); err != nil {
		t.Fatal(err)
	}
	list, next, err := c.ListSecrets(ctx, sdk.SecretListOptions{Limit: 5, NextToken: "n1"})
	if err != nil || next != "n2" || len(list) != 1 || list[0].SecretID != "sec_1" {
		t.Errorf("list: %+v, %q, %v", list, next, err)
	}
	if err := c.DeleteSecret(ctx, "sec_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSecret(ctx, "x"); !sdk.IsNotFound(err) {
		t.Errorf("unknown secret: %v, want not found", err)
	}

	reqs := f.requests()
	wantReqs := []recorded{
		{Method: "POST", Path: "/secrets", Body: map[string]any{"name": "OpenAI", "value": "sk-1", "metadata": map[string]any{"o": "p"}}, Key: testKey},
		// Metadata nil goes as null, which keeps the secret's.
		{Method: "POST", Path: "/secrets/openai", Body: map[string]any{"value": "sk-2", "metadata": nil}, Key: testKey},
		{Method: "GET", Path: "/secrets/sec_1", Key: testKey},
		{Method: "GET", Path: "/secrets", Query: map[string][]string{"limit": {"5"}, "nextToken": {"n1"}}, Key: testKey},
		{Method: "DELETE", Path: "/secrets/sec_1", Key: testKey},
		{Method: "GET", Path: "/secrets/x", Key: testKey},
	}
	if d := cmp.Diff(wantReqs, reqs, cmp.Comparer(func(a, b map[string][]string) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b) })); d != "" {
		t.Errorf("requests (-want +got):\n%s", d)
	}
	if got := sdk.SecretPlaceholder("openai"); got != "${e2b.secrets.openai}" {
		t.Errorf("SecretPlaceholder = %q", got)
	}
}

// TestSecretsNeedATransportThatKeepsThem checks the error of a transport
// without the ability.
func TestSecretsNeedATransportThatKeepsThem(t *testing.T) {
	c := &sdk.Client{Transport: noSecrets{}}
	if _, err := c.CreateSecret(context.Background(), "a", "b", nil); !errdefs.IsNotSupported(err) {
		t.Errorf("create on a transport without secrets: %v", err)
	}
}

// noSecrets is a Transport without SecretTransport.
type noSecrets struct{ sdk.Transport }
