package server

import (
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// arriving yields left bytes at most piece bytes per Read, as a client's
// body arrives over the network.
type arriving struct{ left, piece int }

func (a *arriving) Read(p []byte) (int, error) {
	if a.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), a.piece, a.left)
	clear(p[:n])
	a.left -= n
	return n, nil
}

// writeSizes is a connection that records the size of every write to it.
type writeSizes struct {
	net.Conn
	sizes []int
}

func (w *writeSizes) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return len(p), nil
}

// TestBodiesMoveInBlocks checks how the transport's two ways of copying a
// request body to a sandbox (blockConn.ReadFrom for a body with a length,
// duplexBody.WriteTo for a chunked one) write it: an upload's body, which
// arrives 64 KiB at a time, in blocks of blockSize; any other body as it
// arrives, no write gathering more than one read gave.
func TestBodiesMoveInBlocks(t *testing.T) {
	const size, piece = 3*blockSize + 5, 64 << 10
	tests := []struct {
		name    string
		fill    bool
		chunked bool
		want    []int
	}{
		{"upload with a length", true, false, []int{blockSize, blockSize, blockSize, 5}},
		{"chunked upload", true, true, []int{blockSize, blockSize, blockSize, 5}},
		{"other body with a length", false, false, nil},
		{"other chunked body", false, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &duplexBody{body: io.NopCloser(&arriving{left: size, piece: piece}), sem: make(chan struct{}, 1), fill: tt.fill}
			b.sem <- struct{}{}
			conn := &writeSizes{}
			var n int64
			var err error
			if tt.chunked {
				n, err = b.WriteTo(conn)
			} else {
				// As the transport copies a body with a length.
				n, err = io.Copy(blockConn{conn}, io.LimitReader(b, size))
			}
			if err != nil || n != size {
				t.Fatalf("copied %d bytes, %v; want %d", n, err, size)
			}
			if tt.want == nil {
				// Written as it came: no write gathers pieces.
				if m := slices.Max(conn.sizes); m > piece {
					t.Errorf("a write of %d bytes, of pieces of %d", m, piece)
				}
				return
			}
			if diff := cmp.Diff(tt.want, conn.sizes); diff != "" {
				t.Errorf("write sizes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStreamedBodyIsNotHeldBack sends a chunked request body in two pieces
// through the data plane to the agent's StreamInput, the second only once
// the agent has read the first, as a Connect client stream does: the first
// must reach the agent on its own, and the whole body after it. (A body
// with a length was never a stream: Go's transport holds its first 4 KiB.)
func TestStreamedBodyIsNotHeldBack(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{}`)
	const first, total = 100, 2 * blockSize
	got := make(chan int, 1024)
	e.agent(sb.SandboxID).mux.HandleFunc("/process.Process/StreamInput", func(w http.ResponseWriter, r *http.Request) {
		defer close(got)
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				got <- n
			}
			if err != nil {
				return
			}
		}
	})
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, e.http.URL+"/process.Process/StreamInput", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	done := make(chan error, 1)
	go func() {
		resp, err := e.http.Client().Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	if _, err := pw.Write(make([]byte, first)); err != nil {
		t.Fatal(err)
	}
	seen := 0
	// Not a timing check: without the first piece the agent would wait
	// for ever, and so would this test.
	deadline := time.After(30 * time.Second)
	for seen < first {
		select {
		case n := <-got:
			seen += n
		case <-deadline:
			pw.CloseWithError(errors.New("the test gave up"))
			t.Fatalf("the agent got %d of the first %d bytes, and the client waits to send more", seen, first)
		}
	}
	go func() {
		pw.Write(make([]byte, total-first))
		pw.Close()
	}()
	for n := range got {
		seen += n
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if seen != total {
		t.Errorf("the agent got %d bytes, want %d", seen, total)
	}
}
