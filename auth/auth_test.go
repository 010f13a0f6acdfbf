package auth

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

var keyShape = regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)

func TestCreateVerifyRemove(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	plain, k, err := s.Create(ctx, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	if !keyShape.MatchString(plain) {
		t.Fatalf("key %q is not shaped e2b_<40 hex>", plain)
	}
	if k.Name != "laptop" || !strings.HasPrefix(k.ID, "key_") || k.Hint != plain[:8]+"…" || k.Created.IsZero() {
		t.Errorf("record = %+v", k)
	}
	got, err := s.Verify(ctx, plain)
	if err != nil {
		t.Fatalf("Verify(fresh key): %v", err)
	}
	if got.ID != k.ID || got.LastUsed.IsZero() {
		t.Errorf("Verify = %+v, want id %s with LastUsed set", got, k.ID)
	}
	if err := s.Remove(ctx, "laptop"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verify(ctx, plain); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("Verify(removed key) = %v, want ErrUnauthenticated", err)
	}
	if err := s.Remove(ctx, "laptop"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Remove twice = %v, want ErrNotFound", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	plain, _, err := s.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	other := "e2b_" + strings.Repeat("0", 40)
	tests := []struct {
		name string
		key  string
	}{
		{name: "empty", key: ""},
		{name: "no prefix", key: strings.TrimPrefix(plain, "e2b_")},
		{name: "short", key: plain[:len(plain)-1]},
		{name: "long", key: plain + "0"},
		{name: "uppercase", key: strings.ToUpper(plain)},
		{name: "well formed but unknown", key: other},
		{name: "last digit changed", key: plain[:len(plain)-1] + flip(plain[len(plain)-1])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Verify(ctx, tt.key)
			if !errors.Is(err, errdefs.ErrUnauthenticated) {
				t.Fatalf("Verify(%q) = %v, want ErrUnauthenticated", tt.key, err)
			}
			if tt.key != "" && strings.Contains(err.Error(), tt.key) {
				t.Errorf("the error repeats the key: %v", err)
			}
		})
	}
}

func flip(c byte) string {
	if c == '0' {
		return "1"
	}
	return "0"
}

func TestOnlyHashesAreStored(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	plain, _, err := s.Create(ctx, "ci")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, p := range []string{path, path + "-wal"} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if strings.Contains(string(data), plain) || strings.Contains(string(data), plain[4:]) {
			t.Errorf("%s holds the plaintext key", filepath.Base(p))
		}
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm()&0o077 != 0 {
		t.Errorf("database mode %v (%v), want owner-only", st.Mode().Perm(), err)
	}
}

func TestListAndNames(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	_, a, err := s.Create(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := s.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if b.Name != b.ID {
		t.Errorf("unnamed key got name %q, want its id %q", b.Name, b.ID)
	}
	if _, _, err := s.Create(ctx, "a"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second key named a: %v, want ErrAlreadyExists", err)
	}
	if _, _, err := s.Create(ctx, "bad\nname"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("name with a newline: %v, want ErrInvalidArgument", err)
	}
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	keys, err := s2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Key{*a, *b}
	if d := cmp.Diff(want, keys); d != "" {
		t.Errorf("List after reopen (-want +got):\n%s", d)
	}
	// Remove works by id as well as by name.
	if err := s2.Remove(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s2.List(ctx); len(keys) != 1 || keys[0].ID != a.ID {
		t.Errorf("after removing %s: %+v", b.ID, keys)
	}
}

func TestAdd(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	key := "e2b_" + strings.Repeat("ab", 20)
	if _, err := s.Add(ctx, "fixed", key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verify(ctx, key); err != nil {
		t.Errorf("Verify(added key): %v", err)
	}
	if _, err := s.Add(ctx, "again", key); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("adding the same key twice: %v, want ErrAlreadyExists", err)
	}
	if _, err := s.Add(ctx, "bad", "sk-123"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("adding a malformed key: %v, want ErrInvalidArgument", err)
	}
	// A name shaped like a key id would let Remove(name) hit another key.
	if _, _, err := s.Create(ctx, "key_0123456789abcdef"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("creating a key named like an id: %v, want ErrInvalidArgument", err)
	}
}

func TestEnsureFirstKey(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	first, err := s.EnsureFirstKey(ctx, "default")
	if err != nil || !keyShape.MatchString(first) {
		t.Fatalf("EnsureFirstKey on an empty store = %q, %v", first, err)
	}
	again, err := s.EnsureFirstKey(ctx, "default")
	if err != nil || again != "" {
		t.Errorf("EnsureFirstKey with a key present = %q, %v; want \"\", nil", again, err)
	}
	if keys, _ := s.List(ctx); len(keys) != 1 || keys[0].Name != "default" {
		t.Errorf("keys = %+v, want just default", keys)
	}
	if _, err := s.Verify(ctx, first); err != nil {
		t.Errorf("the first key does not verify: %v", err)
	}
}

func TestLastUsedIsThrottled(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	plain, _, err := s.Create(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Verify(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if _, err := s.Verify(ctx, plain); err != nil {
		t.Fatal(err)
	}
	keys, _ := s.List(ctx)
	if len(keys) != 1 || !keys[0].LastUsed.Equal(first.LastUsed) {
		t.Errorf("LastUsed = %v, want the first use %v kept within a minute", keys[0].LastUsed, first.LastUsed)
	}
}

func TestOpenEmptyPath(t *testing.T) {
	if _, err := Open(""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Open(\"\") = %v, want ErrInvalidArgument", err)
	}
}

func TestTeams(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	plainA, a, err := s.Create(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	plainB, b, err := s.CreateInTeam(ctx, "blue-team", "b")
	if err != nil {
		t.Fatal(err)
	}
	if a.Team != DefaultTeam || b.Team != "blue-team" {
		t.Errorf("teams %q and %q, want %q and blue-team", a.Team, b.Team, DefaultTeam)
	}
	for plain, want := range map[string]string{plainA: DefaultTeam, plainB: "blue-team"} {
		if k, err := s.Verify(ctx, plain); err != nil || k.Team != want {
			t.Errorf("Verify = %+v, %v; want team %q", k, err, want)
		}
	}
	keys, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var teams []string
	for _, k := range keys {
		teams = append(teams, k.Team)
	}
	if diff := cmp.Diff([]string{DefaultTeam, "blue-team"}, teams); diff != "" {
		t.Errorf("listed teams (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "Blue", "-x", "a b", "a/b", strings.Repeat("x", 64), "tëam"} {
		if _, _, err := s.CreateInTeam(ctx, bad, ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CreateInTeam(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// TestMigrationKeepsKeys opens a database made before keys had teams: its
// keys keep working, in the default team.
func TestMigrationKeepsKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	const plain = "e2b_00112233445566778899aabbccddeeff00112233"
	if _, err := old.Exec(schema); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(`INSERT INTO api_keys(id, name, hash, hint, created_ns) VALUES('key_1', 'old', ?, 'e2b_0011…', 1)`, hashKey(plain)); err != nil {
		t.Fatal(err)
	}
	old.Close()
	for range 2 { // a second open finds it migrated
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		k, err := s.Verify(ctx, plain)
		if err != nil || k.Name != "old" || k.Team != DefaultTeam {
			t.Errorf("Verify(old key) = %+v, %v; want it in team %q", k, err, DefaultTeam)
		}
		if _, _, err := s.CreateInTeam(ctx, "red", ""); err != nil {
			t.Errorf("create after migration: %v", err)
		}
		s.Close()
	}
}
