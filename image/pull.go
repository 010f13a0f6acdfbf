package image

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/lightbearco/tupper/errdefs"
)

// PullOptions tunes Pull.
type PullOptions struct {
	// Insecure allows plain HTTP, and HTTPS without certificate checks: for a
	// registry on loopback or on a network you trust. Registries on localhost,
	// loopback addresses and private networks speak plain HTTP without it.
	Insecure bool
	// Platform picks the image from a multi-platform index, as
	// "os/arch[/variant]". Empty means linux on this machine's architecture.
	Platform string
	// Transport, when set, carries every request of the pull (to the
	// registry, and wherever it redirects) in place of the default one,
	// which Insecure otherwise tunes. Anonymous pulls without the Docker
	// config's credentials. Both are for pulls that a client of the daemon
	// asks for rather than its operator (a template's base, see package
	// template): such a pull must reach neither the host's own network
	// nor the images that the operator's credentials open.
	Transport http.RoundTripper
	Anonymous bool
}

// defaultPlatform is the platform Pull and Import choose when none is given.
func defaultPlatform() v1.Platform {
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

func parsePlatform(s string) (v1.Platform, error) {
	if s == "" {
		return defaultPlatform(), nil
	}
	p, err := v1.ParsePlatform(s)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("invalid platform %q: write it as os/arch[/variant], such as linux/arm64: %w", s, errdefs.ErrInvalidArgument)
	}
	return *p, nil
}

// Pull fetches the image ref from its registry (for a multi-platform image,
// the one for opts.Platform), stores it and names it after ref (normalized,
// see NormalizeName). Blobs and root filesystems the store has already are
// not fetched or unpacked again. Credentials come from the Docker config
// (~/.docker/config.json and its credential helpers), as for docker pull.
func (s *Store) Pull(ctx context.Context, ref string, opts PullOptions, progress Progress) (*Image, error) {
	rep := newReporter(progress)
	var nopts []name.Option
	if opts.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return nil, fmt.Errorf("pull %q: not an image reference (%v): write it as [registry/]repository[:tag|@digest], such as docker.io/library/alpine:3: %w",
			ref, err, errdefs.ErrInvalidArgument)
	}
	plat, err := parsePlatform(opts.Platform)
	if err != nil {
		return nil, err
	}
	imgName := familiarName(r)
	ropts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithPlatform(plat),
		remote.WithUserAgent("tupper"),
	}
	if !opts.Anonymous {
		ropts = append(ropts, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	}
	switch {
	case opts.Transport != nil:
		ropts = append(ropts, remote.WithTransport(opts.Transport))
	case opts.Insecure:
		t := remote.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for by the caller
		ropts = append(ropts, remote.WithTransport(t))
	}

	end, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer end()

	rep.message(PhaseResolve, imgName, "resolving "+r.Name())
	img, err := remote.Image(r, ropts...)
	if err != nil {
		return nil, remoteError(ref, err)
	}
	req, err := imageRequest(img, []string{imgName}, "pull "+r.Name(), registryLayer)
	if err != nil {
		return nil, remoteError(ref, err)
	}
	out, err := s.ingest(ctx, req, rep)
	if err != nil {
		return nil, remoteError(ref, err)
	}
	return out, nil
}

// remoteError names the pull that failed and, for errors from talking to a
// registry, adds the error class and a hint.
func remoteError(ref string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		for _, d := range terr.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				return fmt.Errorf("pull %s: the registry does not have it (%v): check the repository and tag: %w", ref, err, errdefs.ErrNotFound)
			}
		}
		switch terr.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("pull %s: the registry does not have it (%v): check the repository and tag: %w", ref, err, errdefs.ErrNotFound)
		case http.StatusUnauthorized:
			return fmt.Errorf("pull %s: the registry wants credentials (%v): log in with `docker login` (tupper reads ~/.docker/config.json): %w", ref, err, errdefs.ErrUnauthenticated)
		case http.StatusForbidden:
			return fmt.Errorf("pull %s: the registry refused access (%v): check your credentials and that the repository exists: %w", ref, err, errdefs.ErrPermissionDenied)
		case http.StatusTooManyRequests:
			return fmt.Errorf("pull %s: the registry limits requests (%v): wait and retry, or log in for a higher limit: %w", ref, err, errdefs.ErrResourceExhausted)
		}
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	var uerr *url.Error
	var nerr net.Error
	if errors.As(err, &uerr) || errors.As(err, &nerr) {
		return fmt.Errorf("pull %s: cannot talk to the registry (%v): check its address and your network; for a registry that speaks plain HTTP use the insecure option: %w",
			ref, err, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("pull %s: %w", ref, err)
}

// registryLayer is a layer pulled from a registry, stored compressed as it
// is served, with its diff id from the config to check it by.
func registryLayer(l v1.Layer) (layerSource, error) {
	src, err := compressedLayer(l)
	if err != nil {
		return layerSource{}, err
	}
	src.DiffID, err = l.DiffID()
	return src, err
}
