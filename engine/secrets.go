package engine

import (
	"context"
	"fmt"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/secret"
)

// Secrets are a team's: every call below acts for the team of its
// context's scope (DefaultTeam without one), and a secret of another team
// answers as one that does not exist. A sandbox's network rules name
// secrets with E2B's placeholder, "${e2b.secrets.NAME}"; create and
// UpdateNetwork check each name against the secrets of the sandbox's team
// and record a reference to the secret's id in its place
// (netpolicy.SecretRef), so that the recorded policy, the backend's copy
// of it and every listing hold no value. The egress proxy asks
// SecretValue for the value as it sets each header: a secret updated
// since is sent at its new value, and one deleted is sent no more.

// SecretInfo describes a secret; it never holds the value.
type SecretInfo = secret.Info

// teamOf returns the team that calls on ctx act for.
func teamOf(ctx context.Context) string {
	if s, ok := ScopeFrom(ctx); ok {
		return s.Team
	}
	return DefaultTeam
}

// secrets returns the engine's secret store, or an error of class
// errdefs.ErrNotSupported when it keeps none.
func (e *Engine) secrets(op string) (*secret.Store, error) {
	if e.cfg.Secrets == nil {
		return nil, fmt.Errorf("%s: this daemon keeps no secrets: %w", op, errdefs.ErrNotSupported)
	}
	return e.cfg.Secrets, nil
}

// CreateSecret stores a new secret of the caller's team.
func (e *Engine) CreateSecret(ctx context.Context, name, value string, md map[string]string) (*SecretInfo, error) {
	st, err := e.secrets("create secret")
	if err != nil {
		return nil, err
	}
	info, err := st.Create(ctx, teamOf(ctx), name, value, md)
	if err != nil {
		return nil, err
	}
	e.log.Info("secret created", "secret", info.ID, "name", info.Name, "team", info.Team)
	return info, nil
}

// UpdateSecret gives the caller's team's secret ref (its id or name) a new
// value, as its next version; md, when not nil, replaces its metadata.
// Sandboxes whose rules use the secret send the new value from their next
// request on.
func (e *Engine) UpdateSecret(ctx context.Context, ref, value string, md map[string]string) (*SecretInfo, error) {
	st, err := e.secrets("update secret")
	if err != nil {
		return nil, err
	}
	info, err := st.Update(ctx, teamOf(ctx), ref, value, md)
	if err != nil {
		return nil, err
	}
	e.log.Info("secret updated", "secret", info.ID, "name", info.Name, "team", info.Team, "version", info.Version)
	return info, nil
}

// GetSecret describes the caller's team's secret ref, its id or name.
func (e *Engine) GetSecret(ctx context.Context, ref string) (*SecretInfo, error) {
	st, err := e.secrets("get secret")
	if err != nil {
		return nil, err
	}
	return st.Get(ctx, teamOf(ctx), ref)
}

// ListSecrets returns a page of up to limit of the caller's team's secrets
// (0: all), oldest first, and the token of the next page, empty on the
// last.
func (e *Engine) ListSecrets(ctx context.Context, limit int, nextToken string) ([]*SecretInfo, string, error) {
	st, err := e.secrets("list secrets")
	if err != nil {
		return nil, "", err
	}
	return st.List(ctx, teamOf(ctx), limit, nextToken)
}

// DeleteSecret removes the caller's team's secret ref (its id or name).
// The rules of running sandboxes that use it stay; their requests fail in
// the egress proxy from then on, rather than go out without it.
func (e *Engine) DeleteSecret(ctx context.Context, ref string) error {
	st, err := e.secrets("delete secret")
	if err != nil {
		return err
	}
	if err := st.Delete(ctx, teamOf(ctx), ref); err != nil {
		return err
	}
	e.log.Info("secret deleted", "secret", ref, "team", teamOf(ctx))
	return nil
}

// SecretValue returns the value of secret id for a request of sandbox
// sandboxID, which the egress proxy is about to send: only a secret of the
// sandbox's own team opens, whatever its recorded rules say. Its errors
// never hold the value.
func (e *Engine) SecretValue(ctx context.Context, sandboxID, id string) (string, error) {
	st, err := e.secrets("secret value")
	if err != nil {
		return "", err
	}
	sb, err := e.Get(ctx, sandboxID)
	if err != nil {
		return "", err
	}
	return st.Value(ctx, sb.Team, id)
}

// bindSecrets rewrites, in p (a copy the caller owns), every secret
// placeholder of a rule's header to a reference to the secret of team it
// names. A name team has no secret of fails with
// errdefs.ErrInvalidArgument naming it, and so does a reference written
// by the client: only the engine writes them, for secrets it has checked.
func (e *Engine) bindSecrets(ctx context.Context, team string, p *netpolicy.Policy) error {
	if p == nil {
		return nil
	}
	for host, rules := range p.Rules {
		for i, r := range rules {
			if r.Transform == nil {
				continue
			}
			for h, v := range r.Transform.Headers {
				if netpolicy.HasSecretRef(v) {
					return fmt.Errorf("network.rules[%q][%d]: header %q: ${tupper.secret.…} references are Tupper's own: name a secret as ${e2b.secrets.NAME}: %w", host, i, h, errdefs.ErrInvalidArgument)
				}
				if !netpolicy.HasSecretPlaceholder(v) {
					continue
				}
				st, err := e.secrets(fmt.Sprintf("network.rules[%q][%d]: header %q", host, i, h))
				if err != nil {
					return err
				}
				out, err := netpolicy.ReplaceSecretPlaceholders(v, func(name string) (string, error) {
					info, err := st.Get(ctx, team, name)
					if errdefs.IsNotFound(err) {
						return "", fmt.Errorf("the team has no secret named %q: create it first (Secret.create, or `tupper secret create`): %w", name, errdefs.ErrInvalidArgument)
					}
					if err != nil {
						return "", err
					}
					return netpolicy.SecretRef(info.ID), nil
				})
				if err != nil {
					return fmt.Errorf("network.rules[%q][%d]: header %q: %w", host, i, h, err)
				}
				r.Transform.Headers[h] = out
			}
		}
	}
	return nil
}

// bindSandboxSecrets is bindSecrets for a new policy of sandbox id, whose
// team's secrets its placeholders name.
func (e *Engine) bindSandboxSecrets(ctx context.Context, id string, p *netpolicy.Policy) error {
	if p == nil || len(p.Rules) == 0 {
		return nil
	}
	sb, err := e.Get(ctx, id)
	if err != nil {
		return err
	}
	if err := e.bindSecrets(ctx, sb.Team, p); err != nil {
		return fmt.Errorf("sandbox %q: %w", id, err)
	}
	return nil
}
