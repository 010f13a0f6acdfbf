package secret

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lightbearco/tupper/errdefs"
)

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// randomValue returns a value no file holds by chance.
func randomValue(t *testing.T) string {
	b := make([]byte, 16)
	rand.Read(b)
	return "sk-test-" + hex.EncodeToString(b)
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())

	info, err := s.Create(ctx, "red", "OpenAI-Key", "v1", map[string]string{"owner": "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if !IsID(info.ID) || info.Name != "openai-key" || info.Version != 1 || info.Team != "red" {
		t.Errorf("created %+v: want an id, the name in lower case, version 1", info)
	}
	if _, err := s.Create(ctx, "red", "OPENAI-KEY", "again", nil); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second secret of the same name: %v, want already exists", err)
	}
	for _, ref := range []string{info.ID, "openai-key", "OpenAI-KEY"} {
		got, err := s.Get(ctx, "red", ref)
		if err != nil {
			t.Fatalf("get %q: %v", ref, err)
		}
		if d := cmp.Diff(info, got); d != "" {
			t.Errorf("get %q (-created +got):\n%s", ref, d)
		}
	}

	// An update makes the next version, keeps the metadata unless given,
	// and its value replaces the old one.
	up, err := s.Update(ctx, "red", "openai-key", "v2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if up.Version != 2 || up.Metadata["owner"] != "ops" || !up.CreatedAt.Equal(info.CreatedAt) || up.UpdatedAt.Before(info.UpdatedAt) {
		t.Errorf("after update: %+v", up)
	}
	up, err = s.Update(ctx, "red", info.ID, "v3", map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if up.Version != 3 || len(up.Metadata) != 0 {
		t.Errorf("after an update with empty metadata: %+v", up)
	}
	if got, err := s.Get(ctx, "red", info.ID); err != nil || got.Version != 3 {
		t.Errorf("get after updates: %+v, %v; want version 3", got, err)
	}
	if v, err := s.Value(ctx, "red", info.ID); err != nil || v != "v3" {
		t.Errorf("value %q, %v; want the current one", v, err)
	}

	if err := s.Delete(ctx, "red", "openai-key"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "red", info.ID); !errdefs.IsNotFound(err) {
		t.Errorf("get after delete: %v", err)
	}
	if _, err := s.Value(ctx, "red", info.ID); !errdefs.IsNotFound(err) {
		t.Errorf("value after delete: %v", err)
	}
	if err := s.Delete(ctx, "red", info.ID); !errdefs.IsNotFound(err) {
		t.Errorf("second delete: %v", err)
	}
	// The name is free again, for a new secret with a new id.
	again, err := s.Create(ctx, "red", "openai-key", "v1", nil)
	if err != nil || again.ID == info.ID {
		t.Errorf("re-create: %+v, %v", again, err)
	}
}

func TestTeamsAreApart(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	red, err := s.Create(ctx, "red", "token", "red-value", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Another team may use the same name, for a secret of its own.
	blue, err := s.Create(ctx, "blue", "token", "blue-value", nil)
	if err != nil || blue.ID == red.ID {
		t.Fatalf("blue's secret of the same name: %+v, %v", blue, err)
	}
	for _, ref := range []string{red.ID, "nosuch"} {
		if _, err := s.Get(ctx, "green", ref); !errdefs.IsNotFound(err) {
			t.Errorf("green gets %q: %v", ref, err)
		}
		if _, err := s.Update(ctx, "green", ref, "x", nil); !errdefs.IsNotFound(err) {
			t.Errorf("green updates %q: %v", ref, err)
		}
		if err := s.Delete(ctx, "green", ref); !errdefs.IsNotFound(err) {
			t.Errorf("green deletes %q: %v", ref, err)
		}
		if _, err := s.Value(ctx, "blue", ref); !errdefs.IsNotFound(err) {
			t.Errorf("blue reads the value of %q: %v", ref, err)
		}
	}
	list, _, err := s.List(ctx, "blue", 0, "")
	if err != nil || len(list) != 1 || list[0].ID != blue.ID {
		t.Errorf("blue lists %+v, %v; want its own secret only", list, err)
	}
	if v, err := s.Value(ctx, "red", red.ID); err != nil || v != "red-value" {
		t.Errorf("red's value after blue's attempts: %q, %v", v, err)
	}
}

// TestValuesAreSealed checks that no file of the store but the key holds
// a value, even after the value was replaced or deleted, and that the key
// and the directory are their owner's alone.
func TestValuesAreSealed(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "secrets")
	s := openStore(t, dir)
	values := []string{randomValue(t), randomValue(t), randomValue(t)}
	a, err := s.Create(ctx, "red", "a", values[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "red", a.ID, values[1], nil); err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(ctx, "red", "b", values[2], nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "red", b.ID); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) < 2 {
			t.Fatalf("%s: the store's directory holds %d files", when, len(entries))
		}
		for _, e := range entries {
			if e.Name() == "secrets.key" {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range values {
				if bytes.Contains(data, []byte(v)) {
					t.Errorf("%s: %s holds value %d in the clear", when, e.Name(), i)
				}
			}
		}
	}
	check("while open")
	s.Close()
	check("after close")
	if runtime.GOOS == "windows" {
		return
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "secrets.key"): 0o600, filepath.Join(dir, "secrets.db"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s has mode %04o, want %04o", path, got, want)
		}
	}
}

func TestWrongKeyFails(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "red", "token", "value", nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	key := filepath.Join(dir, "secrets.key")
	original, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}

	// Another store's key does not open this one.
	other := t.TempDir()
	o, err := Open(Config{Dir: other})
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	_, err = Open(Config{Dir: dir, KeyFile: filepath.Join(other, "secrets.key")})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "not the one") {
		t.Errorf("open with another key: %v, want a failed precondition that says the key is not the one", err)
	}

	// A lost key is not replaced by a new one once values are sealed.
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	_, err = Open(Config{Dir: dir})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("open without its key: %v, want a failed precondition that says the key is missing", err)
	}
	if _, err := os.Stat(key); !os.IsNotExist(err) {
		t.Errorf("a key file was made for a database sealed under another: %v", err)
	}

	// A key file others can read is refused.
	if runtime.GOOS != "windows" {
		if err := os.WriteFile(key, original, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(key, 0o644)
		if _, err := Open(Config{Dir: dir}); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("open with a key others can read: %v, want permission denied", err)
		}
	}

	// The right key opens it again, with its value.
	if err := os.WriteFile(key, original, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(key, 0o600)
	s = openStore(t, dir)
	info, err := s.Get(ctx, "red", "token")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Value(ctx, "red", info.ID); err != nil || v != "value" {
		t.Errorf("value with the right key: %q, %v", v, err)
	}
}

// TestSealedValueIsBoundToItsRow checks that a sealed value copied into
// another secret's row does not open there: a write to the database
// cannot hand one team's value to another.
func TestSealedValueIsBoundToItsRow(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir)
	red, err := s.Create(ctx, "red", "token", "red-value", nil)
	if err != nil {
		t.Fatal(err)
	}
	blue, err := s.Create(ctx, "blue", "token", "blue-value", nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "secrets.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE secrets SET sealed = (SELECT sealed FROM secrets WHERE id = ?) WHERE id = ?`, red.ID, blue.ID); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Value(ctx, "blue", blue.ID); err == nil || v != "" {
		t.Errorf("blue's row with red's sealed value opened: %q, %v", v, err)
	} else if strings.Contains(err.Error(), "red-value") {
		t.Errorf("the error holds the value: %v", err)
	}
	// An update's version is part of the binding too: the sealed value of
	// version 1 does not open as version 2.
	if _, err := db.Exec(`UPDATE secrets SET version = 2 WHERE id = ?`, red.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Value(ctx, "red", red.ID); err == nil {
		t.Error("a sealed value opened under another version")
	}
}

func TestChecks(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	long := strings.Repeat("x", MaxValueBytes+1)
	bigMD := map[string]string{}
	for i := range MaxMetadataEntries + 1 {
		bigMD[string(rune('a'+i%26))+strings.Repeat("k", i)] = "v"
	}
	tests := []struct {
		name, secret, value string
		md                  map[string]string
		ok                  bool
	}{
		{name: "plain", secret: "api-key", value: "v", ok: true},
		{name: "spaces and unicode", secret: "clé de l'API", value: "a b\tc é", ok: true},
		{name: "longest name", secret: strings.Repeat("n", MaxNameBytes), value: "v", ok: true},
		{name: "longest value", secret: "big", value: long[:MaxValueBytes], ok: true},
		{name: "empty name", secret: "", value: "v"},
		{name: "name too long", secret: strings.Repeat("n", MaxNameBytes+1), value: "v"},
		{name: "brace", secret: "a}b", value: "v"},
		{name: "open brace", secret: "a{b", value: "v"},
		{name: "control", secret: "a\nb", value: "v"},
		{name: "id prefix", secret: "sec_abc", value: "v"},
		{name: "id prefix in capitals", secret: "SEC_abc", value: "v"},
		{name: "bad utf-8", secret: "a\xffb", value: "v"},
		{name: "empty value", secret: "e", value: ""},
		{name: "value too long", secret: "e", value: long},
		{name: "line break in value", secret: "e", value: "zz-value\r\nX-Evil: 1"},
		{name: "NUL in value", secret: "e", value: "zz-value\x00"},
		{name: "DEL in value", secret: "e", value: "zz-value\x7f"},
		{name: "value too long, quoted?", secret: "e", value: "zz" + long},
		{name: "too much metadata", secret: "m", value: "v", md: bigMD},
		{name: "empty metadata key", secret: "m", value: "v", md: map[string]string{"": "v"}},
		{name: "metadata value too long", secret: "m", value: "v", md: map[string]string{"k": strings.Repeat("v", MaxMetadataValue+1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Create(ctx, "red", tt.secret, tt.value, tt.md)
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("create: %v, want invalid argument", err)
			}
			if strings.HasPrefix(tt.value, "zz") && strings.Contains(err.Error(), tt.value) {
				t.Errorf("the error quotes the value: %v", err)
			}
		})
	}
	if _, err := s.Update(ctx, "red", "api-key", "a\nb", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("update with a line break: %v", err)
	}
}

func TestListPages(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	var want []string
	for i := range 5 {
		info, err := s.Create(ctx, "red", "s"+string(rune('a'+i)), "v", nil)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, info.Name)
	}
	s.Create(ctx, "blue", "other", "v", nil)
	var got []string
	pages, tok := 0, ""
	for {
		page, next, err := s.List(ctx, "red", 2, tok)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, info := range page {
			got = append(got, info.Name)
		}
		if next == "" {
			break
		}
		tok = next
	}
	if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" || pages != 3 {
		t.Errorf("pages %d (want 3), names (-want +got):\n%s", pages, d)
	}
	if _, _, err := s.List(ctx, "red", 2, "garbage!"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a bad token: %v", err)
	}
}
