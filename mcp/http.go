package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/errdefs"
)

// Limits of the HTTP transport.
const (
	// maxRequestBody bounds one request: a write_file of a few MiB,
	// base64-encoded, with room to spare.
	maxRequestBody = 32 << 20
	// sessionIdle closes sessions that sent nothing for this long.
	sessionIdle = 30 * time.Minute
)

// KeyVerifier checks an API key; *auth.Store is one. Verify fails with an
// error of class errdefs.ErrUnauthenticated for a key it does not know.
type KeyVerifier interface {
	Verify(ctx context.Context, key string) (*auth.Key, error)
}

var _ KeyVerifier = (*auth.Store)(nil)

// Handler serves the MCP server of cfg over Streamable HTTP (mount it at
// /mcp). Every request needs an API key, as X-API-KEY or as
// "Authorization: Bearer KEY"; a session stays bound to the key that
// opened it. cfg.Scope, which is required, confines each call to what
// its key (see CallerKey) may see and touch.
func Handler(cfg Config, keys KeyVerifier) (http.Handler, error) {
	if keys == nil {
		return nil, fmt.Errorf("mcp: a KeyVerifier is required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Scope == nil {
		// Unscoped, every key would see every sandbox.
		return nil, fmt.Errorf("mcp: Handler needs a Scope that confines each API key: %w", errdefs.ErrInvalidArgument)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	srv, err := NewServer(cfg)
	if err != nil {
		return nil, err
	}
	streams := mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return srv }, &mcpsdk.StreamableHTTPOptions{
		Logger:              sdkLogger(cfg.Logger),
		SessionTimeout:      sessionIdle,
		MaxRequestBodyBytes: maxRequestBody,
	})
	verify := func(ctx context.Context, token string, _ *http.Request) (*mcpauth.TokenInfo, error) {
		k, err := keys.Verify(ctx, token)
		if err != nil {
			if errors.Is(err, errdefs.ErrUnauthenticated) || errors.Is(err, errdefs.ErrNotFound) {
				return nil, fmt.Errorf("invalid API key: %w", mcpauth.ErrInvalidToken)
			}
			return nil, err
		}
		// UserID binds the session to the key: another key presenting
		// its session id is refused. The team rides along for Scope.
		return &mcpauth.TokenInfo{UserID: k.ID, Extra: map[string]any{teamExtra: k.Team}}, nil
	}
	bearer := mcpauth.RequireBearerToken(verify, &mcpauth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	return apiKeyAsBearer(bearer(streams)), nil
}

// apiKeyAsBearer lets X-API-KEY, which the E2B tools send, stand for
// "Authorization: Bearer", which MCP clients send, and refuses requests
// with neither in JSON, saying how to authenticate.
func apiKeyAsBearer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimSpace(r.Header.Get("X-API-KEY"))
		if r.Header.Get("Authorization") == "" && key != "" {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+key)
		}
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("WWW-Authenticate", `Bearer realm="tupper"`)
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{
				"code":    http.StatusUnauthorized,
				"message": "missing API key: send it as X-API-KEY or Authorization: Bearer",
			})
			return
		}
		next.ServeHTTP(w, r)
	})
}
