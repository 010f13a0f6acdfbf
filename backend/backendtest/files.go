package backendtest

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/sdk"
)

func testFiles(t *testing.T, sb *sdk.Sandbox) {
	t.Run("default user", func(t *testing.T) {
		info, err := sb.Files.Write(ctx(t), "relative.txt", []byte("rel"))
		if err != nil {
			t.Fatal(err)
		}
		if info.Path != "/home/user/relative.txt" {
			t.Errorf("a relative path resolved to %q, want under /home/user", info.Path)
		}
		st, err := sb.Files.Stat(ctx(t), "/home/user/relative.txt")
		if err != nil || st.Owner != "user" {
			t.Errorf("Stat = %+v, %v; want a file owned by user", st, err)
		}
		if res := run(t, sb, "cat relative.txt"); res.Stdout != "rel" {
			t.Errorf("the file holds %q", res.Stdout)
		}
		if _, err := sb.Files.Write(ctx(t), "/root/as-root.txt", []byte("r"), sdk.WithUser("root")); err != nil {
			t.Errorf("root writing /root: %v", err)
		}
	})

	t.Run("100 MiB round trip", func(t *testing.T) {
		const size = 100 << 20
		const p = "/home/user/big.bin"
		src := io.LimitReader(rand.NewChaCha8([32]byte{'t', 'u', 'p'}), size)
		sent := sha256.New()
		if _, err := sb.Files.WriteStream(ctx(t), p, io.TeeReader(src, sent)); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%x", sent.Sum(nil))
		if got, _, _ := strings.Cut(run(t, sb, "sha256sum "+p).Stdout, " "); got != want {
			t.Errorf("sha256 inside the sandbox %s, sent %s", got, want)
		}
		rc, err := sb.Files.ReadStream(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		h := sha256.New()
		n, err := io.Copy(h, rc)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%x", h.Sum(nil)); n != size || got != want {
			t.Errorf("read back %d bytes with sha256 %s; wrote %d with %s", n, got, size, want)
		}
		if err := sb.Files.Remove(ctx(t), p); err != nil {
			t.Error(err)
		}
	})

	t.Run("list stat mkdir move remove", func(t *testing.T) {
		base := "/home/user/tree"
		created, err := sb.Files.MakeDir(ctx(t), base+"/d/e")
		if err != nil || !created {
			t.Fatalf("MakeDir = %v, %v", created, err)
		}
		// An existing directory is the agent's already_exists, which the
		// SDK reports as false.
		if created, err := sb.Files.MakeDir(ctx(t), base+"/d/e"); err != nil || created {
			t.Errorf("MakeDir of an existing directory = %v, %v; want false, nil", created, err)
		}
		for _, p := range []string{"a.txt", "d/b.txt", "d/e/c.txt"} {
			if _, err := sb.Files.Write(ctx(t), base+"/"+p, []byte(p)); err != nil {
				t.Fatal(err)
			}
		}
		rel := func(es []sdk.EntryInfo) []string {
			var out []string
			for _, e := range es {
				out = append(out, strings.TrimPrefix(e.Path, base+"/"))
			}
			slices.Sort(out)
			return out
		}
		es, err := sb.Files.List(ctx(t), base, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := rel(es), []string{"a.txt", "d"}; !slices.Equal(got, want) {
			t.Errorf("List depth 1 = %q, want %q", got, want)
		}
		es, err = sb.Files.List(ctx(t), base, 3)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := rel(es), []string{"a.txt", "d", "d/b.txt", "d/e", "d/e/c.txt"}; !slices.Equal(got, want) {
			t.Errorf("List depth 3 = %q, want %q", got, want)
		}
		st, err := sb.Files.Stat(ctx(t), base+"/d/b.txt")
		if err != nil {
			t.Fatal(err)
		}
		if st.Name != "b.txt" || st.Type != sdk.FileTypeFile || st.Size != 7 || st.Owner != "user" || st.ModifiedTime.IsZero() {
			t.Errorf("Stat = %+v", st)
		}
		if time.Since(st.ModifiedTime) > time.Hour || time.Until(st.ModifiedTime) > time.Hour {
			t.Errorf("modified time %v is far from now: is the sandbox's clock right?", st.ModifiedTime)
		}
		if st, err := sb.Files.Stat(ctx(t), base+"/d"); err != nil || st.Type != sdk.FileTypeDir {
			t.Errorf("Stat(dir) = %+v, %v", st, err)
		}
		run(t, sb, "ln -s d/b.txt "+base+"/link")
		if st, err := sb.Files.Stat(ctx(t), base+"/link"); err != nil || st.Type != sdk.FileTypeSymlink || !strings.HasSuffix(st.SymlinkTarget, "b.txt") {
			t.Errorf("Stat(symlink) = %+v, %v", st, err)
		}

		moved, err := sb.Files.Rename(ctx(t), base+"/d", base+"/moved")
		if err != nil {
			t.Fatal(err)
		}
		if moved.Path != base+"/moved" || moved.Type != sdk.FileTypeDir {
			t.Errorf("Rename = %+v", moved)
		}
		if b, err := sb.Files.Read(ctx(t), base+"/moved/e/c.txt"); err != nil || string(b) != "d/e/c.txt" {
			t.Errorf("after the move: %q, %v", b, err)
		}
		if ok, err := sb.Files.Exists(ctx(t), base+"/d"); ok || err != nil {
			t.Errorf("Exists(old path) = %v, %v", ok, err)
		}
		if err := sb.Files.Remove(ctx(t), base); err != nil {
			t.Fatal(err)
		}
		if ok, err := sb.Files.Exists(ctx(t), base); ok || err != nil {
			t.Errorf("Exists after Remove = %v, %v", ok, err)
		}
	})

	t.Run("watch", func(t *testing.T) {
		dir := "/home/user/watched"
		if _, err := sb.Files.MakeDir(ctx(t), dir); err != nil {
			t.Fatal(err)
		}
		w, err := sb.Files.Watch(ctx(t), dir, sdk.WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		seen := map[sdk.EventType][]string{}
		expect := func(typ sdk.EventType, name string) {
			t.Helper()
			timeout := time.After(10 * time.Second)
			for !slices.Contains(seen[typ], name) {
				select {
				case ev, ok := <-w.Events():
					if !ok {
						t.Fatalf("the watch ended (%v) before a %s event for %q", w.Err(), typ, name)
					}
					seen[ev.Type] = append(seen[ev.Type], ev.Name)
				case <-timeout:
					t.Fatalf("no %s event for %q; saw %v", typ, name, seen)
				}
			}
		}
		if _, err := sb.Files.Write(ctx(t), dir+"/new.txt", []byte("1")); err != nil {
			t.Fatal(err)
		}
		expect(sdk.EventCreate, "new.txt")
		run(t, sb, "echo more >> "+dir+"/new.txt")
		expect(sdk.EventWrite, "new.txt")
		if err := sb.Files.Remove(ctx(t), dir+"/new.txt"); err != nil {
			t.Fatal(err)
		}
		expect(sdk.EventRemove, "new.txt")
	})

	t.Run("spaces and unicode", func(t *testing.T) {
		dir := "/home/user/dir with spaces/ünïcødé ✓"
		name := "файл 🦫 it's.txt"
		p := dir + "/" + name
		info, err := sb.Files.Write(ctx(t), p, []byte("wide"))
		if err != nil {
			t.Fatal(err)
		}
		if info.Path != p || info.Name != name {
			t.Errorf("WriteInfo = %+v", info)
		}
		if b, err := sb.Files.Read(ctx(t), p); err != nil || string(b) != "wide" {
			t.Errorf("Read = %q, %v", b, err)
		}
		if res := run(t, sb, "cat "+shellQuote(p)); res.Stdout != "wide" {
			t.Errorf("cat = %q", res.Stdout)
		}
		es, err := sb.Files.List(ctx(t), dir, 1)
		if err != nil || len(es) != 1 || es[0].Name != name || es[0].Path != p {
			t.Errorf("List = %+v, %v", es, err)
		}
		run(t, sb, "printf made > "+shellQuote(dir+"/by shell ß.txt"))
		if b, err := sb.Files.Read(ctx(t), dir+"/by shell ß.txt"); err != nil || string(b) != "made" {
			t.Errorf("Read of a file made by the shell = %q, %v", b, err)
		}
		infos, err := sb.Files.WriteMany(ctx(t), []sdk.WriteEntry{
			{Path: dir + "/many 1 ö.txt", Data: []byte("one")},
			{Path: dir + "/sub dir/many 2 ☃.txt", Reader: strings.NewReader("two")},
		})
		if err != nil || len(infos) != 2 {
			t.Fatalf("WriteMany = %+v, %v", infos, err)
		}
		if res := run(t, sb, "cat "+shellQuote(dir+"/many 1 ö.txt")+" "+shellQuote(dir+"/sub dir/many 2 ☃.txt")); res.Stdout != "onetwo" {
			t.Errorf("WriteMany wrote %q", res.Stdout)
		}
		to := path.Join(dir, "renamed ✓.txt")
		if _, err := sb.Files.Rename(ctx(t), p, to); err != nil {
			t.Fatal(err)
		}
		if ok, err := sb.Files.Exists(ctx(t), to); !ok || err != nil {
			t.Errorf("Exists(renamed) = %v, %v", ok, err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		const missing = "/home/user/no/such/path"
		notFound := map[string]error{
			"Read":   func() error { _, err := sb.Files.Read(ctx(t), missing); return err }(),
			"Stat":   func() error { _, err := sb.Files.Stat(ctx(t), missing); return err }(),
			"List":   func() error { _, err := sb.Files.List(ctx(t), missing, 1); return err }(),
			"Remove": sb.Files.Remove(ctx(t), missing),
			"Rename": func() error { _, err := sb.Files.Rename(ctx(t), missing, missing+"2"); return err }(),
			"Watch":  func() error { _, err := sb.Files.Watch(ctx(t), missing, sdk.WatchOptions{}); return err }(),
		}
		for name, err := range notFound {
			if !sdk.IsNotFound(err) {
				t.Errorf("%s of a missing path: err = %v, want not found", name, err)
			}
		}
		if _, err := sb.Files.Read(ctx(t), "/home/user"); err == nil {
			t.Error("Read of a directory succeeded")
		}
		if _, err := sb.Files.Write(ctx(t), "/home/user/plain", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Files.MakeDir(ctx(t), "/home/user/plain/sub"); err == nil {
			t.Error("MakeDir under a file succeeded")
		}
		if _, err := sb.Commands.Run(ctx(t), "true", sdk.WithUser("nobody-here")); !sdk.IsUnauthenticated(err) {
			t.Errorf("unknown user: err = %v, want unauthenticated", err)
		}
	})
}
