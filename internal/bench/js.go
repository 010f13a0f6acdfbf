package bench

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

//go:embed bench.mjs
var benchScript []byte

// JSSDK is the published e2b JS SDK, run by node, that the bench's JS
// figures go through.
type JSSDK struct {
	// Node is the node binary.
	Node string
	// Module is the SDK's ES module entry (…/node_modules/e2b/dist/index.mjs).
	Module string
	// Env is the script's environment: the daemon in E2B_API_URL,
	// E2B_SANDBOX_URL and E2B_API_KEY.
	Env []string
}

// FindJSSDK looks for node and for the e2b package in a node_modules
// directory under one of dirs or their parents (e2e/e2b/node_modules, where
// Tupper's checkout keeps it, or node_modules). It returns why not when
// either is missing.
func FindJSSDK(dirs ...string) (*JSSDK, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("no node/e2b SDK: node is not installed")
	}
	for _, start := range dirs {
		abs, err := filepath.Abs(start)
		if err != nil {
			continue
		}
		for dir := abs; ; dir = filepath.Dir(dir) {
			for _, nm := range []string{filepath.Join(dir, "node_modules"), filepath.Join(dir, "e2e", "e2b", "node_modules")} {
				if mod, ok := e2bModule(filepath.Join(nm, "e2b")); ok {
					return &JSSDK{Node: node, Module: mod}, nil
				}
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	return nil, fmt.Errorf("no node/e2b SDK: no node_modules/e2b found (run npm ci in e2e/e2b, or pass --e2b-js)")
}

// e2bModule returns the ES module entry of the e2b package in dir.
func e2bModule(dir string) (string, bool) {
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return "", false
	}
	var pkg struct {
		Name   string `json:"name"`
		Module string `json:"module"`
	}
	if json.Unmarshal(data, &pkg) != nil || pkg.Name != "e2b" || pkg.Module == "" {
		return "", false
	}
	entry := filepath.Join(dir, pkg.Module)
	_, err = os.Stat(entry)
	return entry, err == nil
}

// jsSample is one run the script reports.
type jsSample struct {
	Op    string  `json:"op"`
	Bytes int64   `json:"bytes"`
	MS    float64 `json:"ms"`
}

// run runs the script against sandbox id and returns its samples.
func (j *JSSDK) run(ctx context.Context, id string, runs int, sizes []int64) ([]jsSample, error) {
	dir, err := os.MkdirTemp("", "tupper-bench-js-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "bench.mjs")
	if err := os.WriteFile(script, benchScript, 0o600); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	strs := make([]string, len(sizes))
	for i, s := range sizes {
		strs[i] = strconv.FormatInt(s, 10)
	}
	cmd := exec.CommandContext(ctx, j.Node, script, j.Module)
	cmd.Env = append(j.Env, "BENCH_SANDBOX="+id, fmt.Sprintf("BENCH_RUNS=%d", runs), "BENCH_SIZES="+strings.Join(strs, ","))
	out, err := cmd.CombinedOutput()
	var samples []jsSample
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "bench ")
		if !ok {
			continue
		}
		var s jsSample
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			return samples, fmt.Errorf("bench.mjs printed %q: %w", line, err)
		}
		samples = append(samples, s)
	}
	if err != nil {
		return samples, fmt.Errorf("node bench.mjs: %w: %s", err, lastLines(string(out), 5))
	}
	return samples, nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
