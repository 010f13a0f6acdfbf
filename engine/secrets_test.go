package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/secret"
)

// newSecretEngine returns an engine on the fake backend with a secret
// store of its own.
func newSecretEngine(t *testing.T) (*Engine, *backendtest.Fake) {
	t.Helper()
	st, err := secret.Open(secret.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fake := backendtest.NewFake()
	return newEngineOn(t, fake, func(c *Config) { c.Secrets = st }), fake
}

// ruleWith is a policy whose one rule sets header X-Key to v for
// api.example.com.
func ruleWith(v string) *netpolicy.Policy {
	return &netpolicy.Policy{Rules: map[string][]netpolicy.Rule{
		"api.example.com": {{Transform: &netpolicy.Transform{Headers: map[string]string{"X-Key": v}}}},
	}}
}

func header(p *netpolicy.Policy) string {
	return p.Rules["api.example.com"][0].Transform.Headers["X-Key"]
}

// TestSecretPlaceholders checks that a rule's placeholders become
// references to the secrets of the sandbox's team in the record and in
// what the backend enforces, never the value; that an unknown name, a
// reference written by the client and another team's name are refused;
// and that the proxy's resolver opens only the sandbox's team's secrets.
func TestSecretPlaceholders(t *testing.T) {
	e, fake := newSecretEngine(t)
	red := WithScope(context.Background(), Scope{Team: "red", Key: "key_red"})
	blue := WithScope(context.Background(), Scope{Team: "blue", Key: "key_blue"})
	const value = "sk-red-value-42"
	info, err := e.CreateSecret(red, "OpenAI", value, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateSecret(blue, "blue-only", "sk-blue", nil); err != nil {
		t.Fatal(err)
	}

	sb, err := e.Create(red, CreateOptions{Network: ruleWith("Bearer ${e2b.secrets.openai} (${e2b.secrets.OpenAI})")})
	if err != nil {
		t.Fatal(err)
	}
	want := "Bearer " + netpolicy.SecretRef(info.ID) + " (" + netpolicy.SecretRef(info.ID) + ")"
	rec, err := e.Get(red, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := header(rec.Network); got != want {
		t.Errorf("recorded header %q, want %q", got, want)
	}
	if got := header(fake.Spec(sb.ID).Network); got != want {
		t.Errorf("the backend got header %q, want %q", got, want)
	}
	if v, err := e.SecretValue(context.Background(), sb.ID, info.ID); err != nil || v != value {
		t.Errorf("the resolver: %q, %v", v, err)
	}

	for _, tt := range []struct {
		name string
		ctx  context.Context
		v    string
		want string
	}{
		{"unknown name", red, "${e2b.secrets.nosuch}", `no secret named "nosuch"`},
		{"another team's name", red, "${e2b.secrets.blue-only}", `no secret named "blue-only"`},
		{"a reference by hand", blue, netpolicy.SecretRef(info.ID), "Tupper's own"},
		{"an unclosed placeholder", red, "${e2b.secrets.openai", "not closed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Create(tt.ctx, CreateOptions{Network: ruleWith(tt.v)})
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("create: %v, want invalid argument saying %q", err, tt.want)
			}
			_, err = e.UpdateNetwork(red, sb.ID, ruleWith(tt.v), nil)
			if tt.ctx == red && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("update: %v, want invalid argument saying %q", err, tt.want)
			}
		})
	}
	if got := header(fake.Network(sb.ID)); got != want {
		t.Errorf("a refused update changed the enforced header to %q", got)
	}

	// An update binds its placeholders to the sandbox's team; the
	// resolver opens a secret only for a sandbox of its team.
	if _, err := e.UpdateNetwork(red, sb.ID, ruleWith("${e2b.secrets.openai}"), nil); err != nil {
		t.Fatal(err)
	}
	if got := header(fake.Network(sb.ID)); got != netpolicy.SecretRef(info.ID) {
		t.Errorf("after update the backend enforces %q", got)
	}
	blueSB, err := e.Create(blue, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.SecretValue(context.Background(), blueSB.ID, info.ID); !errdefs.IsNotFound(err) {
		t.Errorf("red's secret for blue's sandbox: %v, want not found", err)
	}

	// A deleted secret resolves to nothing.
	if err := e.DeleteSecret(red, info.ID); err != nil {
		t.Fatal(err)
	}
	if v, err := e.SecretValue(context.Background(), sb.ID, info.ID); !errdefs.IsNotFound(err) || v != "" {
		t.Errorf("a deleted secret: %q, %v", v, err)
	}
}

func TestSecretsAreTeams(t *testing.T) {
	e, _ := newSecretEngine(t)
	red := WithScope(context.Background(), Scope{Team: "red"})
	blue := WithScope(context.Background(), Scope{Team: "blue"})
	info, err := e.CreateSecret(red, "token", "v", map[string]string{"a": "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.GetSecret(blue, info.ID); !errdefs.IsNotFound(err) {
		t.Errorf("blue gets red's secret: %v", err)
	}
	if _, err := e.UpdateSecret(blue, "token", "x", nil); !errdefs.IsNotFound(err) {
		t.Errorf("blue updates red's secret: %v", err)
	}
	if err := e.DeleteSecret(blue, info.ID); !errdefs.IsNotFound(err) {
		t.Errorf("blue deletes red's secret: %v", err)
	}
	if list, _, err := e.ListSecrets(blue, 0, ""); err != nil || len(list) != 0 {
		t.Errorf("blue lists %v, %v", list, err)
	}
	up, err := e.UpdateSecret(red, "token", "w", nil)
	if err != nil || up.Version != 2 {
		t.Errorf("red's update: %+v, %v", up, err)
	}
	// Calls without a scope are the default team's.
	if _, err := e.GetSecret(context.Background(), "token"); !errdefs.IsNotFound(err) {
		t.Errorf("the default team gets red's secret: %v", err)
	}
}

func TestNoSecretStore(t *testing.T) {
	e := newEngineOn(t, backendtest.NewFake(), nil)
	ctx := context.Background()
	if _, err := e.CreateSecret(ctx, "a", "b", nil); !errdefs.IsNotSupported(err) {
		t.Errorf("create secret without a store: %v", err)
	}
	if _, err := e.Create(ctx, CreateOptions{Network: ruleWith("${e2b.secrets.a}")}); !errdefs.IsNotSupported(err) {
		t.Errorf("a placeholder without a store: %v", err)
	}
	// Plain header values need no store.
	if _, err := e.Create(ctx, CreateOptions{Network: ruleWith("Bearer plain")}); err != nil {
		t.Error(err)
	}
}
