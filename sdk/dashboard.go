package sdk

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// DashboardLink is a link that opens the web dashboard of `tupper serve`
// signed in, once, with the rights of the credential that asked for it.
type DashboardLink struct {
	// URL is the link; it holds a secret, and works once.
	URL string `json:"url"`
	// ExpiresAt is when the link stops working if unused.
	ExpiresAt time.Time `json:"expiresAt"`
}

// DashboardTransport is a Transport that can ask for a sign-in link to the
// daemon's web dashboard. Without it, Client.DashboardLink fails with
// errdefs.ErrNotSupported.
type DashboardTransport interface {
	DashboardLink(ctx context.Context) (*DashboardLink, error)
}

// DashboardLink asks the daemon for a one-time link that opens its web
// dashboard signed in as the client's credential.
func (c *Client) DashboardLink(ctx context.Context) (*DashboardLink, error) {
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	dt, ok := t.(DashboardTransport)
	if !ok {
		return nil, fmt.Errorf("this transport has no dashboard: %w", errdefs.ErrNotSupported)
	}
	return dt.DashboardLink(ctx)
}

// DashboardLink implements DashboardTransport: POST /dashboard/links,
// Tupper's own route.
func (t *HTTPTransport) DashboardLink(ctx context.Context) (*DashboardLink, error) {
	var out DashboardLink
	if _, err := t.call(ctx, http.MethodPost, "/dashboard/links", nil, struct{}{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
