// Command testagent stands in for the Tupper agent in the gvisor backend's
// tests. It is built static by the tests and mounted into the sandbox like the
// real agent; it must stay small and depend on nothing but the standard
// library.
//
// It serves on :49983:
//
//	GET /health          204
//	GET /exec?cmd=...    runs "/bin/sh -c cmd" and answers JSON {"output","exit"}
//	GET /alloc?mb=N      allocates and touches N MiB in this process, keeps it, 200
//	GET /dial?addr=h:p   opens a TCP connection to h:p within 2s: 200, or 502 and why
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

var (
	mu   sync.Mutex
	kept [][]byte
)

func main() {
	addr := flag.String("addr", ":49983", "listen address")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/exec", handleExec)
	mux.HandleFunc("/alloc", handleAlloc)
	mux.HandleFunc("/dial", handleDial)
	log.Fatal(http.ListenAndServe(*addr, mux))
}

// Result is the answer of /exec.
type Result struct {
	Output string `json:"output"`
	Exit   int    `json:"exit"`
}

func handleExec(w http.ResponseWriter, r *http.Request) {
	cmd := exec.CommandContext(r.Context(), "/bin/sh", "-c", r.URL.Query().Get("cmd"))
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	res := Result{Output: string(out)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.Exit = ee.ExitCode()
	case err != nil:
		res.Exit = -1
		res.Output += err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

func handleAlloc(w http.ResponseWriter, r *http.Request) {
	mb, err := strconv.Atoi(r.URL.Query().Get("mb"))
	if err != nil || mb <= 0 {
		http.Error(w, "bad mb", http.StatusBadRequest)
		return
	}
	for i := 0; i < mb; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		mu.Lock()
		kept = append(kept, b)
		mu.Unlock()
	}
	fmt.Fprintf(w, "allocated %d MiB\n", mb)
}

func handleDial(w http.ResponseWriter, r *http.Request) {
	c, err := net.DialTimeout("tcp", r.URL.Query().Get("addr"), 2*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	c.Close()
	fmt.Fprintln(w, "connected")
}
