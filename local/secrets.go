package local

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
	"github.com/lightbearco/tupper/secret"
)

// The runtime keeps the teams' secrets under Root/secrets (the database
// and its key, both its owner's alone), gives them to the engine, which
// checks and records the rules that name them, and gives each backend's
// egress proxy a resolver that reads a value, through the engine, only
// for a sandbox of the secret's own team.

// openSecrets opens the secret store under cfg.Root and, unless the
// caller gave one, sets the backends' resolver to values, which answers
// once the engine runs.
func openSecrets(cfg *Config, values *secretValues) (*secret.Store, error) {
	st, err := secret.Open(secret.Config{Dir: filepath.Join(cfg.Root, "secrets")})
	if err != nil {
		return nil, err
	}
	if cfg.Network.Secrets == nil {
		cfg.Network.Secrets = values.value
	}
	return st, nil
}

// secretValues resolves rules' secrets for the backends' egress proxies
// through the engine, which is set once it runs: the backends open, and
// may carry requests of sandboxes of an earlier run, before it does.
type secretValues struct {
	engine atomic.Pointer[engine.Engine]
}

func (s *secretValues) value(ctx context.Context, sandbox, id string) (string, error) {
	e := s.engine.Load()
	if e == nil {
		return "", fmt.Errorf("secret %q: the engine is not running yet: %w", id, errdefs.ErrUnavailable)
	}
	return e.SecretValue(ctx, sandbox, id)
}

var _ sdk.SecretTransport = (*Runtime)(nil)

func secretInfo(s *engine.SecretInfo) *sdk.SecretInfo {
	return &sdk.SecretInfo{SecretID: s.ID, Name: s.Name, Version: s.Version, Metadata: s.Metadata, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// CreateSecret implements sdk.SecretTransport.
func (r *Runtime) CreateSecret(ctx context.Context, name, value string, metadata map[string]string) (*sdk.SecretInfo, error) {
	s, err := r.engine.CreateSecret(ctx, name, value, metadata)
	if err != nil {
		return nil, err
	}
	return secretInfo(s), nil
}

// UpdateSecret implements sdk.SecretTransport.
func (r *Runtime) UpdateSecret(ctx context.Context, ref, value string, metadata map[string]string) (*sdk.SecretInfo, error) {
	s, err := r.engine.UpdateSecret(ctx, ref, value, metadata)
	if err != nil {
		return nil, err
	}
	return secretInfo(s), nil
}

// GetSecret implements sdk.SecretTransport.
func (r *Runtime) GetSecret(ctx context.Context, ref string) (*sdk.SecretInfo, error) {
	s, err := r.engine.GetSecret(ctx, ref)
	if err != nil {
		return nil, err
	}
	return secretInfo(s), nil
}

// ListSecrets implements sdk.SecretTransport.
func (r *Runtime) ListSecrets(ctx context.Context, q sdk.SecretListOptions) (*sdk.SecretPage, error) {
	list, next, err := r.engine.ListSecrets(ctx, q.Limit, q.NextToken)
	if err != nil {
		return nil, err
	}
	page := &sdk.SecretPage{NextToken: next}
	for _, s := range list {
		page.Secrets = append(page.Secrets, *secretInfo(s))
	}
	return page, nil
}

// DeleteSecret implements sdk.SecretTransport.
func (r *Runtime) DeleteSecret(ctx context.Context, ref string) error {
	return r.engine.DeleteSecret(ctx, ref)
}
