package interpreter

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// descendants counts the processes under this test's process whose
// command line contains what.
func descendants(what string) int {
	parent := map[int]int{}
	cmdline := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		parent[pid] = ppid
		cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cmdline[pid] = string(bytes.ReplaceAll(cl, []byte{0}, []byte{' '}))
	}
	me := os.Getpid()
	n := 0
	for pid, cl := range cmdline {
		if !strings.Contains(cl, what) {
			continue
		}
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == me {
				n++
				break
			}
		}
	}
	return n
}

func TestExploreRestartStorm(t *testing.T) {
	hs := newTestServer(t)
	resp := post(t, context.Background(), hs, "/contexts", map[string]any{"language": "python"})
	var c contextJSON
	json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	t.Logf("kernels before: %d", descendants("ipykernel"))
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/contexts/"+c.ID+"/restart", nil)
			if resp, err := hs.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	peak := 0
	for i := 0; i < 100; i++ {
		peak = max(peak, descendants("python_bridge")+descendants("ipykernel"))
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("peak kernel processes: %d; after: %d", peak, descendants("ipykernel"))
}

func TestExploreQueuedDisconnect(t *testing.T) {
	hs := newTestServer(t)
	run(t, hs, code("kept = 7"))
	first := make(chan execution)
	go func() { first <- run(t, hs, code("import time\ntime.sleep(3)")) }()
	time.Sleep(500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	resp, err := func() (*http.Response, error) {
		b, _ := json.Marshal(code("import time\ntime.sleep(15)\nprint('queued cell ran')"))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/execute", bytes.NewReader(b))
		req.Header.Set("X-Access-Token", testToken)
		return hs.Client().Do(req)
	}()
	t.Logf("queued: %v %v", resp, err)
	if resp != nil {
		resp.Body.Close()
	}
	cancel()
	t.Logf("first: %v", <-first)
	start := time.Now()
	e := run(t, hs, code("kept"))
	t.Logf("after %v: %v", time.Since(start), e)
}

func TestExploreHugeLine(t *testing.T) {
	hs := newTestServer(t)
	for _, tc := range []struct{ lang, code string }{
		{"python", "import sys\nsys.stdout.write('x' * 70_000_000)\nsys.stdout.flush()\nprint('after')"},
		{"js", "process.stdout.write('x'.repeat(70_000_000)); console.log('after')"},
		{"bash", "head -c 70000000 /dev/zero | tr '\\0' x; echo after"},
	} {
		e := run(t, hs, map[string]any{"code": tc.code, "language": tc.lang})
		total := 0
		for _, l := range e.of("stdout") {
			total += len(l.str("text"))
		}
		t.Logf("%s: stdout bytes %d, lines %d, error %v, tail %q", tc.lang, total, len(e), e.err(), e.stdout()[max(0, len(e.stdout())-20):])
	}
}

func TestExploreFloodSlowReader(t *testing.T) {
	hs := newTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp := post(t, ctx, hs, "/execute", code("for i in range(100000): print(i, flush=True)\nprint('done')"))
	defer resp.Body.Close()
	if os.Getenv("SLOW") != "" { time.Sleep(10 * time.Second) }
	start := time.Now()
	var e execution
	dec := json.NewDecoder(resp.Body)
	for {
		var l line
		if err := dec.Decode(&l); err != nil {
			t.Logf("decode: %v", err)
			break
		}
		e = append(e, l)
	}
	out := e.stdout()
	n := strings.Count(out, "\n")
	t.Logf("after %v: lines %d, ended %v, tail %q, err %v", time.Since(start), n, len(e.of("end_of_execution")), out[max(0, len(out)-30):], e.err())
}
