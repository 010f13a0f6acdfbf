package codetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lightbearco/tupper/sdk"
)

// RestartAndRemove checks, through the SDK, what a code context's restart
// and removal do: a restart ends the cell running in it with
// ContextRestarting and drops the variable v the caller set there; once
// removed, the context is not found. The SDK's own tests and the e2e tests
// against a real daemon both run it.
func RestartAndRemove(ctx context.Context, t testing.TB, sb *sdk.Sandbox, contextID string) {
	t.Helper()
	var once sync.Once
	started := make(chan struct{})
	done := make(chan *sdk.Execution, 1)
	go func() {
		e, err := sb.RunCode(ctx, "import time\nprint('go', flush=True)\ntime.sleep(600)", sdk.WithCodeContext(contextID), sdk.WithCodeTimeout(0),
			sdk.WithOnCodeStdout(func(string) { once.Do(func() { close(started) }) }))
		if err != nil {
			t.Errorf("the cell the restart cut: %v", err)
		}
		done <- e
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the long cell never printed")
	}
	if err := sb.RestartCodeContext(ctx, contextID); err != nil {
		t.Fatal(err)
	}
	if e := <-done; e == nil || e.Error == nil || e.Error.Name != "ContextRestarting" {
		t.Fatalf("the running cell: %+v", e)
	}
	if e, err := sb.RunCode(ctx, "v", sdk.WithCodeContext(contextID)); err != nil || e.Error == nil || e.Error.Name != "NameError" {
		t.Fatalf("state after the restart: %+v, %v", e, err)
	}

	if err := sb.RemoveCodeContext(ctx, contextID); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.RunCode(ctx, "1", sdk.WithCodeContext(contextID)); !sdk.IsNotFound(err) {
		t.Fatalf("run in a removed context: %v, want not found", err)
	}
	for name, err := range map[string]error{
		"remove":  sb.RemoveCodeContext(ctx, contextID),
		"restart": sb.RestartCodeContext(ctx, contextID),
	} {
		if !sdk.IsNotFound(err) {
			t.Errorf("%s of a removed context: %v, want not found", name, err)
		}
	}
}

// Context returns a context for one test's calls to the interpreter,
// bounded by three minutes (a kernel's first start in a sandbox takes
// seconds) and ended with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// MustRunCode runs a cell that must reach the interpreter and end.
func MustRunCode(t testing.TB, sb *sdk.Sandbox, code string, opts ...sdk.RunCodeOption) *sdk.Execution {
	t.Helper()
	exec, err := sb.RunCode(Context(t), code, opts...)
	if err != nil {
		t.Fatalf("RunCode(%q): %v", code, err)
	}
	return exec
}
