package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // reads the daemon's records

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestCreateBurst sends a real `tupper serve`, allowed two creates at a
// time and four waiting, a burst of creates far beyond that: each answers
// 201 or 429 with Retry-After, never a 5xx; listing and killing work in
// the middle of it; afterwards no half-made record or network lease is
// left, nor after creates whose clients gave up. Then the published e2b
// SDK meets the limit (e2b/ratelimit.mjs).
func TestCreateBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes")
	}
	d := startServeDaemon(t, "--max-creating", "2", "--max-queued", "4")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	create := func(ctx context.Context, client *http.Client, timeout int) (int, http.Header, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL+"/sandboxes", strings.NewReader(fmt.Sprintf(`{"timeout":%d}`, timeout)))
		req.Header.Set("X-API-KEY", d.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, "", err
		}
		defer resp.Body.Close()
		var body struct {
			SandboxID string `json:"sandboxID"`
			Message   string `json:"message"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, resp.Header, body.SandboxID + body.Message, nil
	}
	status, _, victim, err := create(ctx, d.http, 600)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("create before the burst: %d %s %v", status, victim, err)
	}

	const burst = 48
	type result struct {
		status     int
		retryAfter string
		body       string
		err        error
	}
	results := make(chan result, burst)
	refused := make(chan struct{})
	var once sync.Once
	for range burst {
		go func() {
			status, h, body, err := create(ctx, d.http, 600)
			results <- result{status, h.Get("Retry-After"), body, err}
			if status == http.StatusTooManyRequests {
				once.Do(func() { close(refused) })
			}
		}()
	}
	// In the middle of the burst (some refused, others booting), the
	// rest of the API answers within an ordinary client's deadline.
	select {
	case <-refused:
	case <-ctx.Done():
		t.Fatal("no create of the burst was refused")
	}
	ordinary := &http.Client{Timeout: 30 * time.Second}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/sandboxes", nil)
	req.Header.Set("X-API-KEY", d.Key)
	if resp, err := ordinary.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /sandboxes during the burst: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodDelete, d.URL+"/sandboxes/"+victim, nil)
	req.Header.Set("X-API-KEY", d.Key)
	if resp, err := ordinary.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE during the burst: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	var created []string
	counts := map[int]int{}
	for range burst {
		r := <-results
		counts[r.status]++
		switch {
		case r.err != nil:
			t.Errorf("create: %v", r.err)
		case r.status == http.StatusCreated:
			created = append(created, r.body)
		case r.status == http.StatusTooManyRequests:
			if n, err := strconv.Atoi(r.retryAfter); err != nil || n < 1 {
				t.Errorf("429 with Retry-After %q, want whole seconds of at least one (%s)", r.retryAfter, r.body)
			}
		default:
			t.Errorf("create answered %d: %s", r.status, r.body)
		}
	}
	t.Logf("burst of %d creates: %v", burst, counts)
	if counts[http.StatusCreated] == 0 || counts[http.StatusTooManyRequests] == 0 {
		t.Errorf("answers %v, want both 201s and 429s", counts)
	}
	for _, id := range created {
		if status, body, err := d.api(ctx, http.MethodDelete, "/sandboxes/"+id, nil); err != nil || status != http.StatusNoContent {
			t.Errorf("kill %s: %d %s %v", id, status, body, err)
		}
	}
	d.checkClean(t, ctx)

	// Clients that give up in the middle of their creates (queued or
	// booting) leave nothing, without a restart. One that gives up at the
	// very moment its create answers cannot be told from one that read
	// the answer (the daemon wrote it before it saw the connection go):
	// that sandbox lives out its timeout, as on E2B, so these creates ask
	// for one of a minute, within checkClean's wait. (The engine's
	// TestAbandonedCreateIsKilled holds the kill of abandoned boots.)
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			impatient, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if status, _, body, err := create(impatient, d.http, 60); err == nil && status == http.StatusCreated {
				d.api(ctx, http.MethodDelete, "/sandboxes/"+body, nil)
			}
		}()
	}
	wg.Wait()
	d.checkClean(t, ctx)

	// The published SDK meets the limit.
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	npmCI(t, dir)
	runScript(t, node, dir, d, "ratelimit.mjs", "e2b@2.51.0")
	d.checkClean(t, ctx)
}

// checkClean waits (three minutes at most) until the daemon runs no
// sandbox, and then checks that it holds no half-made record and no
// network lease. The bound is the engine's boot timeout (30 s) and its
// retries of a failed clean-up, with room for a machine that also builds
// Debian images for the tests beside this one (CI once took over a minute).
func (d *serveDaemon) checkClean(t *testing.T, ctx context.Context) {
	t.Helper()
	leases := filepath.Join(d.Root, "backends", "gvisor", "net", "leases")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ids := d.sandboxIDs(ctx, t)
		creating, err := d.recordsCreating()
		if err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(leases)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		if len(ids) == 0 && len(creating) == 0 && len(entries) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			// What the daemon said of the records left creating.
			var said []string
			for _, line := range strings.Split(d.log(), "\n") {
				for _, id := range creating {
					if strings.Contains(line, id) {
						said = append(said, line)
					}
				}
			}
			t.Fatalf("three minutes on: sandboxes %v, records still creating %v, network leases %v; the daemon's log of those records:\n%s",
				ids, creating, names, strings.Join(said, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// recordsCreating returns the ids of the daemon's records of creates under
// way or abandoned, reading its database beside it.
func (d *serveDaemon) recordsCreating() ([]string, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(d.Root, "engine", "tupper.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id FROM sandboxes WHERE state = 'creating'`)
	if err != nil {
		return nil, fmt.Errorf("read the daemon's records: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
