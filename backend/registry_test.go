package backend

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/errdefs"
)

type nopBackend struct{}

func (nopBackend) Start(context.Context, *Spec) (*Sandbox, error) { return nil, nil }
func (nopBackend) State(context.Context, string) (State, error)   { return StateRunning, nil }
func (nopBackend) Stop(context.Context, string) error             { return nil }
func (nopBackend) List(context.Context) ([]string, error)         { return nil, nil }

func TestRegisterAndOpen(t *testing.T) {
	var got Config
	Register("test-nop", func(c Config) (Backend, error) { got = c; return nopBackend{}, nil })
	t.Cleanup(func() { unregisterForTest("test-nop") })

	b, err := Open("test-nop", Config{Root: "/x"})
	if err != nil || b == nil {
		t.Fatalf("Open(test-nop) = %v, %v", b, err)
	}
	if got.Root != "/x" {
		t.Errorf("factory got Root %q, want /x", got.Root)
	}
	_, err = Open("no-such", Config{})
	if err == nil || !strings.Contains(err.Error(), "test-nop") {
		t.Errorf("Open(unknown) = %v, want an error listing test-nop", err)
	}
}

func TestRegisterPanics(t *testing.T) {
	Register("test-dup", func(Config) (Backend, error) { return nopBackend{}, nil })
	t.Cleanup(func() { unregisterForTest("test-dup") })
	tests := []struct {
		name string
		reg  func()
	}{
		{"empty name", func() { Register("", func(Config) (Backend, error) { return nil, nil }) }},
		{"nil factory", func() { Register("test-nil", nil) }},
		{"duplicate", func() { Register("test-dup", func(Config) (Backend, error) { return nil, nil }) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("Register did not panic")
				}
			}()
			tt.reg()
		})
	}
}

func TestOptionHelpers(t *testing.T) {
	if err := CheckOptions("x", map[string]string{"a": "1"}, []string{"a", "b"}); err != nil {
		t.Errorf("known option: %v", err)
	}
	err := CheckOptions("x", map[string]string{"a": "1", "typo": "2"}, []string{"a", "b"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `"typo"`) || !strings.Contains(err.Error(), "a, b") {
		t.Errorf("unknown option: %v, want invalid argument naming it and the known ones", err)
	}
	for v, want := range map[string]bool{"true": true, "1": true, "false": false} {
		if got, err := BoolOption("x", map[string]string{"k": v}, "k"); err != nil || got != want {
			t.Errorf("BoolOption(%q) = %v, %v", v, got, err)
		}
	}
	if got, err := BoolOption("x", nil, "k"); err != nil || got {
		t.Errorf("unset: %v, %v", got, err)
	}
	if _, err := BoolOption("x", map[string]string{"k": "maybe"}, "k"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("not a boolean: %v", err)
	}
}

// TestOpensNeverTypedNil: a failing constructor of a pointer type gives a
// nil Backend, not an interface holding a nil pointer.
func TestOpensNeverTypedNil(t *testing.T) {
	type fake struct{ Backend }
	f := Opens(func(c Config) (string, error) { return c.Root, nil }, func(string) (*fake, error) { return nil, errors.New("no") })
	b, err := f(Config{Root: "/r"})
	if err == nil || b != nil {
		t.Fatalf("Opens = %v, %v; want nil and the error", b, err)
	}
}

// TestUnsupported: a backend's stand-in on an operating system it cannot
// run on fails every call with its error.
func TestUnsupported(t *testing.T) {
	want := errors.New("not here")
	var b Backend = Unsupported{Err: want}
	ctx := context.Background()
	_, e1 := b.Start(ctx, &Spec{})
	_, e2 := b.State(ctx, "x")
	e3 := b.Stop(ctx, "x")
	_, e4 := b.List(ctx)
	for i, err := range []error{e1, e2, e3, e4} {
		if !errors.Is(err, want) {
			t.Errorf("call %d: %v, want %v", i, err, want)
		}
	}
}
