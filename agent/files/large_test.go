package files_test

import (
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lightbearco/tupper/agent/files"
)

// prng is a deterministic, fast stream of incompressible bytes.
type prng struct{ r *rand.ChaCha8 }

func (p prng) Read(b []byte) (int, error) { return p.r.Read(b) }

// TestLargeFileRoundTrip uploads 100 MiB as a streamed multipart body, then
// downloads it: the hashes must match, and the process heap must stay far
// below the file's size throughout, which it could not if either side held
// the body in memory.
func TestLargeFileRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 200 MiB")
	}
	const size = 100 << 20
	base := newServer(t, files.Config{})
	target := filepath.Join(t.TempDir(), "big dir", "big.bin")

	var maxHeap atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > maxHeap.Load() {
				maxHeap.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()

	// Upload, streaming the multipart body through a pipe.
	sent := sha256.New()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		w, err := mw.CreateFormFile("file", target) // the SDKs' shape; the handler reads the raw name
		if err == nil {
			_, err = io.Copy(w, io.TeeReader(io.LimitReader(prng{rand.NewChaCha8([32]byte{7})}, size), sent))
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, _ := http.NewRequest("POST", filesURL(base), pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	if st, err := os.Stat(target); err != nil || st.Size() != size {
		t.Fatalf("uploaded file: %v, size %v", err, st)
	}

	// Download and hash as it streams.
	res, err = http.Get(filesURL(base, "path", target))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.ContentLength != size {
		t.Fatalf("download: status %d, length %d", res.StatusCode, res.ContentLength)
	}
	got := sha256.New()
	if n, err := io.Copy(got, res.Body); err != nil || n != size {
		t.Fatalf("download: %d bytes, %v", n, err)
	}
	if string(got.Sum(nil)) != string(sent.Sum(nil)) {
		t.Error("downloaded bytes differ from the uploaded ones")
	}
	if m := maxHeap.Load(); m > 32<<20 {
		t.Errorf("heap in use peaked at %d MiB moving a %d MiB file: something buffers it", m>>20, size>>20)
	} else {
		t.Logf("heap in use peaked at %.1f MiB", float64(m)/(1<<20))
	}
}
