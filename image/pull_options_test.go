//go:build linux

package image_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
)

// TestPullAnonymousAndTransport pulls from a registry that wants the
// credentials of the Docker config: a pull with them gets the image; an
// Anonymous pull sends none and is refused; a pull with a Transport sends
// its requests through it.
func TestPullAnonymousAndTransport(t *testing.T) {
	const user, pass = "operator", "s3cret"
	var mu sync.Mutex
	var auths []string
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	host := u.Host

	// The Docker config of the daemon's user holds the registry's
	// credentials.
	home := t.TempDir()
	cfgDir := filepath.Join(home, ".docker")
	os.MkdirAll(cfgDir, 0o700)
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, host, base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("DOCKER_CONFIG", cfgDir)

	img := imageOf(t, layerTar(t, file("hello.txt", "hi\n", 0o644)))
	ref := host + "/private/app:1"
	r, _ := name.ParseReference(ref)
	if err := remote.Write(r, img, remote.WithAuth(&authn.Basic{Username: user, Password: pass})); err != nil {
		t.Fatal(err)
	}

	s := newStore(t)
	mu.Lock()
	auths = nil
	mu.Unlock()
	if _, err := s.Pull(ctx(t), ref, image.PullOptions{Anonymous: true}, nil); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("an anonymous pull of a private image: %v, want unauthenticated", err)
	}
	mu.Lock()
	for _, a := range auths {
		if a != "" {
			t.Errorf("an anonymous pull sent Authorization %q", a)
		}
	}
	mu.Unlock()

	var through int
	tr := roundTripper(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		through++
		mu.Unlock()
		return http.DefaultTransport.RoundTrip(r)
	})
	if _, err := s.Pull(ctx(t), ref, image.PullOptions{Transport: tr}, nil); err != nil {
		t.Fatalf("a pull with the Docker config's credentials: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if through == 0 {
		t.Error("the pull did not go through its Transport")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
