package filesystem_test

import (
	"encoding/base64"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/filesystem"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/proto/filesystem/filesystemconnect"
)

// codecs are the two encodings every RPC test runs with: the SDKs speak
// JSON, the Go SDK binary.
var codecs = []struct {
	name string
	opts []connect.ClientOption
}{
	{"json", []connect.ClientOption{connect.WithProtoJSON()}},
	{"binary", nil},
}

// newClients serves a Service over httptest and returns a client per codec.
func newClients(t *testing.T, cfg filesystem.Config) map[string]filesystemconnect.FilesystemClient {
	t.Helper()
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "root" // the host may lack the sandbox's "user"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	svc := filesystem.New(cfg)
	t.Cleanup(func() { svc.Close() })
	mux := http.NewServeMux()
	mux.Handle(filesystemconnect.NewFilesystemHandler(svc))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	clients := make(map[string]filesystemconnect.FilesystemClient)
	for _, c := range codecs {
		clients[c.name] = filesystemconnect.NewFilesystemClient(srv.Client(), srv.URL, c.opts...)
	}
	return clients
}

// forEachCodec runs f once per codec, as a subtest.
func forEachCodec(t *testing.T, cfg filesystem.Config, f func(t *testing.T, c filesystemconnect.FilesystemClient)) {
	clients := newClients(t, cfg)
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) { f(t, clients[c.name]) })
	}
}

// req wraps msg in a Connect request, acting as user when one is given.
func req[T any](msg *T, user string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	if user != "" {
		r.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	return r
}

// codeOf returns err's Connect code, or 0 for nil.
func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root: creates files owned by other users")
	}
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

// chownTree gives dir and everything below it to uid (and the group of the
// same number).
func chownTree(t *testing.T, dir string, uid int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}
