package cli

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
)

func TestBenchRefusesNoRuns(t *testing.T) {
	var stdout, stderr bytes.Buffer
	g := &globals{stdout: &stdout, stderr: &stderr}
	err := runBench(context.Background(), g, &benchOptions{runs: 0, out: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "--runs 0") {
		t.Fatalf("runBench with --runs 0 = %v, want it refused", err)
	}
}

// TestBenchUnreachable: with no daemon at the address, bench says so before
// it measures anything, and writes no report.
func TestBenchUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out := t.TempDir() + "/report"
	var stdout, stderr bytes.Buffer
	g := &globals{stdout: &stdout, stderr: &stderr}
	err = runBench(context.Background(), g, &benchOptions{runs: 1, out: out, api: apiOptions{url: "http://" + addr, key: "e2b_x"}})
	if err == nil || !strings.Contains(err.Error(), "cannot reach tupper at http://"+addr) {
		t.Fatalf("runBench against nothing = %v, want it to say the daemon cannot be reached", err)
	}
	if stdout.Len() != 0 || stderr.Len() != 0 {
		t.Errorf("printed before failing: %q %q", stdout.String(), stderr.String())
	}
}

func TestLoopbackURL(t *testing.T) {
	tests := []struct {
		name string
		url  string
		want bool
	}{
		{name: "IPv4 loopback", url: "http://127.0.0.1:49982", want: true},
		{name: "another IPv4 loopback", url: "http://127.0.0.2:3000", want: true},
		{name: "IPv6 loopback", url: "http://[::1]:3000", want: true},
		{name: "localhost", url: "http://localhost:3000", want: true},
		{name: "a name elsewhere", url: "https://api.example.com", want: false},
		{name: "an address elsewhere", url: "http://10.1.2.3:3000", want: false},
		{name: "not a URL", url: "::", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := loopbackURL(tt.url); got != tt.want {
				t.Errorf("loopbackURL(%q) = %v, want %v", tt.url, got, tt.want)
			}
		})
	}
}
