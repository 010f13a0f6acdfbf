package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/lightbearco/tupper/sdk"
)

// TestRemoteSecrets creates, reads, updates, lists and deletes secrets of
// a real server through the HTTP transport, and starts a sandbox whose
// network rule names one.
func TestRemoteSecrets(t *testing.T) {
	url, key := remoteServer(t)
	tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: url, APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	c := &sdk.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	info, err := c.CreateSecret(ctx, "Remote-Token", "sk-remote-1", map[string]string{"owner": "sdk"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "remote-token" || info.Version != 1 || info.Metadata["owner"] != "sdk" || info.CreatedAt.IsZero() {
		t.Errorf("created %+v", info)
	}
	if _, err := c.CreateSecret(ctx, "remote-token", "again", nil); !sdk.IsAlreadyExists(err) {
		t.Errorf("a second secret of the name: %v", err)
	}
	up, err := c.UpdateSecret(ctx, info.SecretID, "sk-remote-2", nil)
	if err != nil || up.Version != 2 || up.Metadata["owner"] != "sdk" {
		t.Errorf("update: %+v, %v", up, err)
	}
	got, err := c.GetSecret(ctx, "remote-token")
	if err != nil || got.SecretID != info.SecretID || got.Version != 2 {
		t.Errorf("get: %+v, %v", got, err)
	}
	list, _, err := c.ListSecrets(ctx, sdk.SecretListOptions{})
	if err != nil || len(list) != 1 {
		t.Errorf("list: %+v, %v", list, err)
	}

	rule := func(v string) *sdk.NetworkPolicy {
		return &sdk.NetworkPolicy{Rules: map[string][]sdk.NetworkRule{"api.example.com": {{Transform: &sdk.NetworkTransform{Headers: map[string]string{"Authorization": v}}}}}}
	}
	if _, err := c.Create(ctx, sdk.CreateOptions{Network: rule(sdk.SecretPlaceholder("nosuch"))}); !sdk.IsInvalidArgument(err) {
		t.Errorf("a sandbox naming an unknown secret: %v, want invalid argument", err)
	}
	sb, err := c.Create(ctx, sdk.CreateOptions{Network: rule("Bearer " + sdk.SecretPlaceholder("remote-token"))})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill(context.WithoutCancel(ctx))
	if err := sb.SetNetwork(ctx, rule(sdk.SecretPlaceholder("nosuch")), nil); !sdk.IsInvalidArgument(err) {
		t.Errorf("an update naming an unknown secret: %v, want invalid argument", err)
	}

	if err := c.DeleteSecret(ctx, "remote-token"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSecret(ctx, info.SecretID); !sdk.IsNotFound(err) {
		t.Errorf("get after delete: %v", err)
	}
}
