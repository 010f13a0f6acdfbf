package files_test

import (
	"encoding/base64"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lightbearco/tupper/agent/accesstoken"
	"github.com/lightbearco/tupper/agent/files"
	"github.com/lightbearco/tupper/internal/testutil"
)

// TestDownloadFIFO checks that a FIFO planted where a file is expected is
// refused at once instead of hanging the request (and a thread) for ever.
func TestDownloadFIFO(t *testing.T) {
	base := newServer(t, files.Config{})
	p := filepath.Join(t.TempDir(), "out.csv")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	status, body := do(t, http.MethodGet, filesURL(base, "path", p), "", nil)
	checkError(t, status, body, http.StatusBadRequest)
}

// TestSignedURLKeepsItsUser checks that an Authorization header cannot
// switch the user a signed URL was made for: the upload's file belongs to
// the signed user, not to the one the header names.
func TestSignedURLKeepsItsUser(t *testing.T) {
	requireRoot(t)
	const token = "secret-token"
	base := newServer(t, files.Config{AccessToken: accesstoken.New(token)})
	dir := testutil.SharedTempDir(t)
	target := filepath.Join(dir, "up.txt")
	sig := files.Signature(target, "write", "nobody", token, 0)
	u := filesURL(base, "path", target, "username", "nobody", "signature", sig)
	rootAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))
	status, body := do(t, http.MethodPost, u, "application/octet-stream", strings.NewReader("data"), "Authorization", rootAuth)
	if status != http.StatusOK {
		t.Fatalf("signed upload: %d %s", status, body)
	}
	if got := ownerOf(t, target); got != 65534 {
		t.Errorf("the upload of a URL signed for nobody belongs to uid %d", got)
	}
}
