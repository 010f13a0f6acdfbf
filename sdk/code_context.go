package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// CodeContext is a context of the code interpreter: a language, a working
// directory and a kernel holding the state its cells share. Every sandbox
// of the code-interpreter template starts with a default Python and
// JavaScript context, which RunCode uses unless told otherwise.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CodeContextOptions describes a context to create.
type CodeContextOptions struct {
	// Language is the context's language (see WithLanguage); empty means
	// Python.
	Language string
	// Cwd is the working directory of its cells; empty means the
	// interpreter's default directory.
	Cwd string
}

// maxCodeAnswer bounds the answers of the context calls: a list of at
// most a few dozen contexts.
const maxCodeAnswer = 1 << 20

// CreateCodeContext makes a context with its own state and returns once
// its kernel has started, so that a language that cannot start fails here.
func (s *Sandbox) CreateCodeContext(ctx context.Context, opts CodeContextOptions) (*CodeContext, error) {
	body := struct {
		Language string `json:"language,omitempty"`
		Cwd      string `json:"cwd,omitempty"`
	}{opts.Language, opts.Cwd}
	var c CodeContext
	if err := s.codeCall(ctx, http.MethodPost, "/contexts", body, &c); err != nil {
		return nil, codeError("create code context", s.ID(), err)
	}
	return &c, nil
}

// ListCodeContexts returns the sandbox's contexts, the default ones
// included.
func (s *Sandbox) ListCodeContexts(ctx context.Context) ([]CodeContext, error) {
	list := []CodeContext{}
	if err := s.codeCall(ctx, http.MethodGet, "/contexts", nil, &list); err != nil {
		return nil, codeError("list code contexts", s.ID(), err)
	}
	return list, nil
}

// RemoveCodeContext ends context id and its kernel. An unknown id is an
// error of class errdefs.ErrNotFound. Removing a default context is
// allowed: the language's next RunCode without a context makes a new one.
func (s *Sandbox) RemoveCodeContext(ctx context.Context, id string) error {
	if err := s.codeCall(ctx, http.MethodDelete, "/contexts/"+url.PathEscape(id), nil, nil); err != nil {
		return codeError(fmt.Sprintf("remove code context %q", id), s.ID(), err)
	}
	return nil
}

// RestartCodeContext replaces context id's kernel with a fresh one, which
// drops its state, and returns once the new kernel has started. A cell
// running in it ends with an ExecutionError named ContextRestarting. An
// unknown id is an error of class errdefs.ErrNotFound.
func (s *Sandbox) RestartCodeContext(ctx context.Context, id string) error {
	if err := s.codeCall(ctx, http.MethodPost, "/contexts/"+url.PathEscape(id)+"/restart", nil, nil); err != nil {
		return codeError(fmt.Sprintf("restart code context %q", id), s.ID(), err)
	}
	return nil
}

// codeCall makes one plain call to the code interpreter: body (when not
// nil) goes as JSON, a 2xx answer is decoded into out (when not nil).
func (s *Sandbox) codeCall(ctx context.Context, method, path string, body, out any) error {
	req, err := s.conn.portRequest(ctx, CodeInterpreterPort, method, path, body)
	if err != nil {
		return err
	}
	resp, err := s.conn.http.Do(req)
	if err != nil {
		return fromTransport(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fromResponse(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxCodeAnswer))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxCodeAnswer)).Decode(out); err != nil {
		return fmt.Errorf("decode the code interpreter's answer: %w", fromTransport(err))
	}
	return nil
}
