package interpreter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Attacks on the interpreter server from its clients (which, for the
// context routes, may be anyone who knows the sandbox's id: E2B's SDKs
// send no token there) and from what its cells do, on the host's kernels.

// kernelsUnder counts the Jupyter kernels (ipykernel_launcher processes)
// that descend from this test's process.
func kernelsUnder() int {
	parent := map[int]int{}
	var kernels []int
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
		// pid (comm) state ppid …: comm may hold spaces and parentheses.
		s := string(st)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		parent[pid], _ = strconv.Atoi(f[1])
		if cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); bytes.Contains(cl, []byte("ipykernel_launcher")) {
			kernels = append(kernels, pid)
		}
	}
	n := 0
	for _, pid := range kernels {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == os.Getpid() {
				n++
				break
			}
		}
	}
	return n
}

// TestRestartStormStartsBoundedKernels: restarts of one context, each
// abandoned by its client at once, must not start a kernel each. Anyone
// who knows the sandbox's id can send them (the SDKs send no token to
// /contexts), and in a sandbox every Python kernel is about 140 MB: twenty
// of them fill a default sandbox and its out-of-memory killer then takes
// the user's own largest context.
func TestRestartStormStartsBoundedKernels(t *testing.T) {
	hs := newTestServer(t)
	run(t, hs, code("1")) // the default Python context is up
	resp := post(t, context.Background(), hs, "/contexts", map[string]any{"language": "python"})
	var c contextJSON
	json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create a context: %s", resp.Status)
	}
	const pythonContexts = 2

	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/contexts/"+c.ID+"/restart", nil)
			if resp, err := hs.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	peak := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		peak = max(peak, kernelsUnder())
	}
	// One kernel per context, and one more while a restart replaces it.
	if peak > pythonContexts+1 {
		t.Errorf("20 abandoned restarts of one context ran %d Python kernels at once (the server has %d Python contexts): each restart starts a kernel of its own and the ones it replaces keep starting", peak, pythonContexts)
	}
}

// TestManyFlushedPrintsAllArrive: a cell that prints many short lines,
// flushing each (print(…, flush=True), logging, progress bars), gets all
// of them, in order, and ends.
func TestManyFlushedPrintsAllArrive(t *testing.T) {
	hs := newTestServer(t)
	const n = 10000 // ten times ZeroMQ's default high-water mark
	e := run(t, hs, code(fmt.Sprintf("for i in range(%d): print(i, flush=True)\nprint('done')", n)))
	var missing []int
	next := 0
	for _, f := range strings.Fields(e.stdout()) {
		v, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		for ; next < v; next++ {
			missing = append(missing, next)
		}
		next = v + 1
	}
	for ; next < n; next++ {
		missing = append(missing, next)
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d printed lines never reached the client, without an error (the first: %v): the bridge reads the kernel's iopub too slowly and ZeroMQ drops what overflows its queue", len(missing), n, missing[:min(5, len(missing))])
	}
	if !strings.HasSuffix(e.stdout(), "done\n") {
		t.Errorf("the last line is missing: %q", e.stdout()[max(0, len(e.stdout())-40):])
	}
}

// TestHugeOutputIsNotSilentlyDropped: a cell that writes 70 MB at once
// either gets it or is told that it was cut; it must not look as if the
// cell printed nothing.
func TestHugeOutputIsNotSilentlyDropped(t *testing.T) {
	hs := newTestServer(t)
	const size = 70_000_000
	for _, tc := range []struct{ lang, code string }{
		{"python", fmt.Sprintf("import sys\nsys.stdout.write('x' * %d)\nsys.stdout.flush()\nprint('after')", size)},
		{"javascript", fmt.Sprintf("process.stdout.write('x'.repeat(%d)); console.log('after')", size)},
		// One result larger than an event may be: dropped, with a notice.
		{"python", fmt.Sprintf("from IPython.display import display\ndisplay({'text/plain': 'y' * %d}, raw=True)", size)},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			e := run(t, hs, map[string]any{"code": tc.code, "language": tc.lang})
			got := strings.Count(e.stdout(), "x")
			if got < size && e.err() == nil && len(e.of("stderr")) == 0 {
				t.Errorf("the cell wrote %d bytes to stdout; the client got %d, and no error or notice says why", size, got)
			}
		})
	}
}

// TestCellOfAGoneClientDoesNotRun: a cell whose client gave up while it
// waited behind another cell of its context must not run at all: the
// client saw a timeout, and if it tries again the code runs twice.
func TestCellOfAGoneClientDoesNotRun(t *testing.T) {
	hs := newTestServer(t)
	marker := filepath.Join(t.TempDir(), "ran")
	first := make(chan execution)
	go func() { first <- run(t, hs, code("import time\ntime.sleep(3)")) }()
	time.Sleep(500 * time.Millisecond) // the first cell runs

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, _ := json.Marshal(code(fmt.Sprintf("open(%q, 'w').write('ran')", marker)))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/execute", bytes.NewReader(b))
	req.Header.Set("X-Access-Token", testToken)
	if resp, err := hs.Client().Do(req); err == nil {
		io.Copy(io.Discard, resp.Body) // until the client gives up
		resp.Body.Close()
	}
	<-first
	run(t, hs, code("1")) // the queue has drained
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the cell ran although its client had gone away before it started")
	}
}

// TestEnvVarValueWithNULIsRefused: no kernel can put a NUL byte in an
// environment variable; Python then silently set none of the variables
// after it, node cut the value and bash dropped the byte. The request
// must be refused, as a bad name is.
func TestEnvVarValueWithNULIsRefused(t *testing.T) {
	hs := newTestServer(t)
	resp := post(t, context.Background(), hs, "/execute", map[string]any{
		"code":     "import os\n[os.environ.get(k) for k in ('A', 'B', 'C')]",
		"env_vars": map[string]string{"A": "1", "B": "x\x00y", "C": "3"},
	})
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("env_vars with a NUL byte: %s, want 400; the cell said %s", resp.Status, body)
	}
}

// TestContextCwdErrorsNameTheCwd: a context in a directory that does not
// exist, or in a file, is the client's mistake (4xx), and the answer says
// so, rather than blaming the language's program.
func TestContextCwdErrorsNameTheCwd(t *testing.T) {
	hs := newTestServer(t)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	for _, tc := range []struct{ name, lang, cwd string }{
		{"missing", "python", "/nonexistent/dir"},
		{"a file", "javascript", file},
		{"missing, bash", "bash", "/nonexistent/dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, context.Background(), hs, "/contexts", map[string]any{"language": tc.lang, "cwd": tc.cwd})
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 != 4 || !strings.Contains(string(body), tc.cwd) {
				t.Errorf("context with cwd %s: %s %q, want a 4xx naming the cwd", tc.cwd, resp.Status, body)
			}
		})
	}
}
