package sdk

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// Secrets are values, such as API keys, that a team stores once and that
// its sandboxes' network rules send as HTTP headers, without the value
// ever entering a sandbox: a rule's header names a secret with
// SecretPlaceholder, and Tupper's egress proxy puts the value in as each
// request leaves. Values are write-only: no call returns one.

// SecretPlaceholder returns the text that stands for secret name's value
// in a network rule's header value (E2B's Secret.fill), for example
// "Bearer " + SecretPlaceholder("openai"). A create or SetNetwork whose
// rules name a secret the team does not have fails.
func SecretPlaceholder(name string) string { return "${e2b.secrets." + name + "}" }

// SecretInfo describes a secret. It never holds the value.
type SecretInfo struct {
	// SecretID names the secret for good; a name may be deleted and made
	// again for another secret.
	SecretID string
	// Name is unique within the team, in lower case.
	Name string
	// Version counts the values the secret has had: 1 at creation, one
	// more at each update.
	Version   int64
	Metadata  map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// SecretListOptions pages a listing of secrets.
type SecretListOptions struct {
	// Limit is the page size; 0 means the server's default.
	Limit int
	// NextToken continues an earlier listing.
	NextToken string
}

// SecretPage is one page of a listing of secrets.
type SecretPage struct {
	Secrets []SecretInfo
	// NextToken is non-empty when there are more secrets.
	NextToken string
}

// SecretTransport is a Transport that keeps secrets. Without it, the
// Client's secret calls fail with errdefs.ErrNotSupported.
type SecretTransport interface {
	CreateSecret(ctx context.Context, name, value string, metadata map[string]string) (*SecretInfo, error)
	// UpdateSecret gives secret ref (its id or name) a new value, as its
	// next version; metadata, when not nil, replaces its metadata.
	UpdateSecret(ctx context.Context, ref, value string, metadata map[string]string) (*SecretInfo, error)
	GetSecret(ctx context.Context, ref string) (*SecretInfo, error)
	ListSecrets(ctx context.Context, q SecretListOptions) (*SecretPage, error)
	DeleteSecret(ctx context.Context, ref string) error
}

func (c *Client) secretTransport(op string) (SecretTransport, error) {
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	st, ok := t.(SecretTransport)
	if !ok {
		return nil, fmt.Errorf("%s: this transport keeps no secrets: %w", op, errdefs.ErrNotSupported)
	}
	return st, nil
}

// CreateSecret stores a new secret of the caller's team, at version 1. A
// name the team uses already fails with an error of class
// errdefs.ErrAlreadyExists. metadata is optional.
func (c *Client) CreateSecret(ctx context.Context, name, value string, metadata map[string]string) (*SecretInfo, error) {
	st, err := c.secretTransport(fmt.Sprintf("create secret %q", name))
	if err != nil {
		return nil, err
	}
	info, err := st.CreateSecret(ctx, name, value, metadata)
	if err != nil {
		return nil, fmt.Errorf("create secret %q: %w", name, err)
	}
	return info, nil
}

// UpdateSecret gives secret ref (its id or name) a new value, as its next
// version: sandboxes whose rules use it send the new value from their
// next request on. metadata, when not nil, replaces the secret's.
func (c *Client) UpdateSecret(ctx context.Context, ref, value string, metadata map[string]string) (*SecretInfo, error) {
	st, err := c.secretTransport(fmt.Sprintf("update secret %q", ref))
	if err != nil {
		return nil, err
	}
	info, err := st.UpdateSecret(ctx, ref, value, metadata)
	if err != nil {
		return nil, fmt.Errorf("update secret %q: %w", ref, err)
	}
	return info, nil
}

// GetSecret describes secret ref, its id or name; an unknown one is an
// error of class errdefs.ErrNotFound.
func (c *Client) GetSecret(ctx context.Context, ref string) (*SecretInfo, error) {
	st, err := c.secretTransport(fmt.Sprintf("get secret %q", ref))
	if err != nil {
		return nil, err
	}
	info, err := st.GetSecret(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("get secret %q: %w", ref, err)
	}
	return info, nil
}

// ListSecrets returns one page of the team's secrets, oldest first, and
// the token of the next page, which is empty on the last page.
func (c *Client) ListSecrets(ctx context.Context, opts SecretListOptions) ([]SecretInfo, string, error) {
	st, err := c.secretTransport("list secrets")
	if err != nil {
		return nil, "", err
	}
	page, err := st.ListSecrets(ctx, opts)
	if err != nil {
		return nil, "", fmt.Errorf("list secrets: %w", err)
	}
	return page.Secrets, page.NextToken, nil
}

// DeleteSecret removes secret ref (its id or name) and its value. The
// requests of sandboxes whose rules use it fail in the egress proxy from
// then on (502), rather than go out without it. An unknown secret is an
// error of class errdefs.ErrNotFound.
func (c *Client) DeleteSecret(ctx context.Context, ref string) error {
	st, err := c.secretTransport(fmt.Sprintf("delete secret %q", ref))
	if err != nil {
		return err
	}
	if err := st.DeleteSecret(ctx, ref); err != nil {
		return fmt.Errorf("delete secret %q: %w", ref, err)
	}
	return nil
}

var _ SecretTransport = (*HTTPTransport)(nil)

// secretJSON is a secret as the API reports it.
type secretJSON struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

func (s *secretJSON) info() SecretInfo {
	return SecretInfo{SecretID: s.SecretID, Name: s.Name, Version: s.CurrentVersion, Metadata: s.Metadata, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

func secretPath(ref string) string { return "/secrets/" + url.PathEscape(ref) }

// CreateSecret implements SecretTransport: POST /secrets.
func (t *HTTPTransport) CreateSecret(ctx context.Context, name, value string, metadata map[string]string) (*SecretInfo, error) {
	body := struct {
		Name     string            `json:"name"`
		Value    string            `json:"value"`
		Metadata map[string]string `json:"metadata,omitempty"`
	}{name, value, metadata}
	var out secretJSON
	if _, err := t.call(ctx, http.MethodPost, "/secrets", nil, body, &out); err != nil {
		return nil, err
	}
	info := out.info()
	return &info, nil
}

// UpdateSecret implements SecretTransport: POST /secrets/{ref}. Metadata
// nil is sent as null, which keeps the secret's.
func (t *HTTPTransport) UpdateSecret(ctx context.Context, ref, value string, metadata map[string]string) (*SecretInfo, error) {
	body := struct {
		Value    string            `json:"value"`
		Metadata map[string]string `json:"metadata"`
	}{value, metadata}
	var out secretJSON
	if _, err := t.call(ctx, http.MethodPost, secretPath(ref), nil, body, &out); err != nil {
		return nil, err
	}
	info := out.info()
	return &info, nil
}

// GetSecret implements SecretTransport: GET /secrets/{ref}.
func (t *HTTPTransport) GetSecret(ctx context.Context, ref string) (*SecretInfo, error) {
	var out secretJSON
	if _, err := t.call(ctx, http.MethodGet, secretPath(ref), nil, nil, &out); err != nil {
		return nil, err
	}
	info := out.info()
	return &info, nil
}

// ListSecrets implements SecretTransport: GET /secrets, paged by
// X-Next-Token.
func (t *HTTPTransport) ListSecrets(ctx context.Context, q SecretListOptions) (*SecretPage, error) {
	v := url.Values{}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.NextToken != "" {
		v.Set("nextToken", q.NextToken)
	}
	var out []secretJSON
	h, err := t.call(ctx, http.MethodGet, "/secrets", v, nil, &out)
	if err != nil {
		return nil, err
	}
	page := &SecretPage{NextToken: h.Get("X-Next-Token")}
	for i := range out {
		page.Secrets = append(page.Secrets, out[i].info())
	}
	return page, nil
}

// DeleteSecret implements SecretTransport: DELETE /secrets/{ref}.
func (t *HTTPTransport) DeleteSecret(ctx context.Context, ref string) error {
	_, err := t.call(ctx, http.MethodDelete, secretPath(ref), nil, nil, nil)
	return err
}
