package backend

import (
	"context"
	"testing"
)

func TestCheckAll(t *testing.T) {
	factory := func(Config) (Backend, error) { return nopBackend{}, nil }
	for _, name := range []string{"test-works", "test-broken", "test-unchecked"} {
		Register(name, factory)
		t.Cleanup(func() { unregisterForTest(name) })
	}
	RegisterCheck("test-works", func(context.Context) []Finding {
		return []Finding{{What: "a", OK: true}, {What: "tuning", OK: false, Optional: true, Fix: "tune"}}
	})
	RegisterCheck("test-broken", func(context.Context) []Finding {
		return []Finding{{What: "a", OK: true}, {What: "runtime", OK: false, Fix: "install it"}}
	})
	got := map[string]Report{}
	for _, r := range CheckAll(context.Background()) {
		got[r.Backend] = r
	}
	for _, tc := range []struct {
		name           string
		works, checked bool
	}{
		{"test-works", true, true},       // an optional finding that fails does not stop it
		{"test-broken", false, true},     // a needed one does
		{"test-unchecked", false, false}, // no self-check, no claim
	} {
		r, ok := got[tc.name]
		if !ok || r.Works != tc.works || r.Checked != tc.checked {
			t.Errorf("%s: %+v, want works %v, checked %v", tc.name, r, tc.works, tc.checked)
		}
	}
}

func TestRegisterCheckPanics(t *testing.T) {
	Register("test-dup-check", func(Config) (Backend, error) { return nopBackend{}, nil })
	t.Cleanup(func() { unregisterForTest("test-dup-check") })
	RegisterCheck("test-dup-check", func(context.Context) []Finding { return nil })
	for name, reg := range map[string]func(){
		"nil check": func() { RegisterCheck("test-other", nil) },
		"duplicate": func() { RegisterCheck("test-dup-check", func(context.Context) []Finding { return nil }) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("RegisterCheck did not panic")
				}
			}()
			reg()
		})
	}
}
