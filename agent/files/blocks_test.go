package files_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/lightbearco/tupper/agent/files"
)

// countingReader counts the reads made of it and how much each asked for.
type countingReader struct {
	r      io.Reader
	reads  int
	asked  int
	served int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	c.asked += len(p)
	n, err := c.r.Read(p)
	c.served += n
	return n, err
}

// TestUploadReadsLargeBlocks checks that an upload reads its body in large
// blocks, multipart as much as application/octet-stream: inside gVisor each
// read of the connection is a system call, and multipart parsing through
// mime/multipart's own 4 KiB buffer made the E2B JS SDK's writes (always
// multipart) 7× slower than the Go SDK's raw ones. The multipart body
// carries the boundary's prefix ("\r\n--") throughout its data, so that the
// parser's search for the boundary meets near misses at every block's
// edge, and the file must still come out byte for byte.
func TestUploadReadsLargeBlocks(t *testing.T) {
	requireRoot(t)
	const size = 16 << 20
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{3}).Read(data)
	for i := 0; i+4 <= size; i += 4093 {
		copy(data[i:], "\r\n--")
	}
	dir := t.TempDir()
	h := files.New(files.Config{DefaultUser: "root"})

	tests := []struct {
		name string
		body func(path string) (io.Reader, string)
	}{
		{"multipart", func(path string) (io.Reader, string) {
			return multipartBody(t, part{"file", path, string(data)})
		}},
		{"octet-stream", func(string) (io.Reader, string) {
			return bytes.NewReader(data), "application/octet-stream"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".bin")
			body, ctype := tt.body(path)
			cr := &countingReader{r: body}
			req := httptest.NewRequest(http.MethodPost, "/files?path="+path, cr)
			req.Header.Set("Content-Type", ctype)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("upload: %d %s", rec.Code, rec.Body)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("the file's %d bytes differ from the %d uploaded", len(got), len(data))
			}
			// The reader yields all that is asked, so the reads' sizes
			// are the handler's own: 4 KiB reads would be 4,096 of them.
			if avg := cr.asked / cr.reads; avg < 256<<10 {
				t.Errorf("%d reads of the body, asking %d bytes on average; want blocks of at least 256 KiB", cr.reads, avg)
			}
		})
	}
}
