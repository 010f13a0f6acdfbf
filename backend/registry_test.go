package backend

import (
	"context"
	"strings"
	"testing"
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
