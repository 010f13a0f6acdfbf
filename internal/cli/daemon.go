package cli

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/lightbearco/tupper/internal/localsock"
	"github.com/lightbearco/tupper/sdk"
)

// findDaemon returns the transport of the daemon that a command able to
// embed an engine (`tupper mcp`, `tupper run`) should use, or nil when it
// should embed one. It looks, in order, at url (a flag), then
// $TUPPER_API_URL and $E2B_API_URL, then the local socket of root's daemon
// when a daemon listens there, then `tupper serve`'s default address when
// something answers there. Only a daemon reached over TCP needs a key (key,
// else $TUPPER_API_KEY or $E2B_API_KEY); without one, the default address
// is asked only when keyless is set, and then fails for want of a key.
func findDaemon(ctx context.Context, root, url, key string, keyless bool) (*sdk.HTTPTransport, error) {
	cfg := sdk.HTTPConfigFromEnv()
	if url != "" {
		cfg.APIURL, cfg.SandboxURL = url, ""
	}
	if key != "" {
		cfg.APIKey = key
	}
	if cfg.APIURL == "" {
		u, err := localDaemon(ctx, root)
		if err != nil {
			return nil, err
		}
		cfg.APIURL = u
	}
	if cfg.APIURL == "" {
		if (cfg.APIKey == "" && !keyless) || !answers(ctx, defaultDaemonURL) {
			return nil, nil
		}
		cfg.APIURL = defaultDaemonURL
	}
	if _, socket := localsock.FromURL(cfg.APIURL); !socket && cfg.APIKey == "" {
		return nil, fmt.Errorf("the Tupper daemon at %s needs an API key: set TUPPER_API_KEY (the first `tupper serve` prints one), or pass --local for an embedded engine", cfg.APIURL)
	}
	return sdk.NewHTTPTransport(cfg)
}

// localDaemon returns the unix:// URL of the local socket of root's daemon
// when a daemon listens on it, and "" when there is no socket or only a
// stale one. A socket the caller may not connect to is an error that says
// what to do: an embedded engine would not fare better.
func localDaemon(ctx context.Context, root string) (string, error) {
	p := localsock.Of(root)
	if !localsock.Exists(p) {
		return "", nil
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	c, err := d.DialContext(ctx, "unix", p)
	switch {
	case err == nil:
		c.Close()
		return localsock.URL(p), nil
	case denied(err):
		return "", socketDenied(p)
	}
	return "", nil
}
