package local_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
)

// TestFilesActAsTheUser reproduces "user becomes root through an upload" in
// a real sandbox: code running as `user` links files of its home to /etc,
// and file operations done as `user` (the default) must then be refused,
// leaving /etc as it was and root's. Before the fix, an upload to
// ~/data.csv made /etc/passwd user's. Root keeps its reach, and ordinary
// uploads to the home work as before.
func TestFilesActAsTheUser(t *testing.T) {
	s := newStack(t, engine.Config{})
	sb := s.create(t, sdk.CreateOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := sdk.WithUser("root")

	// What the user's code does: plain links, no privilege needed.
	run(t, sb, "ln -s /etc/passwd ~/data.csv && ln -s /etc ~/d && ln -s /etc/shadow ~/notes.txt && "+
		"ln -s /etc/hostname ~/readme && echo mine > ~/mine.txt")
	const etcState = "stat -c '%n %u %g %a %s %Y' /etc /etc/passwd /etc/shadow /etc/hostname; sha256sum /etc/passwd /etc/shadow; ls -A /etc | wc -l"
	before := run(t, sb, etcState, root).Stdout
	etcUnchanged := func(t *testing.T) {
		t.Helper()
		if after := run(t, sb, etcState, root).Stdout; after != before {
			t.Errorf("/etc changed:\nbefore %s\nafter  %s", before, after)
		}
	}
	evil := []byte("user::0:0::/root:/bin/bash\n")

	refused := []struct {
		name string
		call func() error
	}{
		{"upload to a link to /etc/passwd", func() error { _, err := sb.Files.Write(ctx, "~/data.csv", evil); return err }},
		{"upload into a linked directory", func() error { _, err := sb.Files.Write(ctx, "/home/user/d/evil", evil); return err }},
		{"upload with parents made through a linked directory", func() error {
			_, err := sb.Files.Write(ctx, "d/cron.d/evil", evil)
			return err
		}},
		{"upload to /etc/passwd by name", func() error { _, err := sb.Files.Write(ctx, "/etc/passwd", evil); return err }},
		{"mkdir through a linked directory", func() error { _, err := sb.Files.MakeDir(ctx, "~/d/sudoers.d/x"); return err }},
		{"move into a linked directory", func() error { _, err := sb.Files.Rename(ctx, "~/mine.txt", "~/d/mine.txt"); return err }},
		{"move a root file out through a link", func() error { _, err := sb.Files.Rename(ctx, "~/d/hostname", "~/stolen"); return err }},
		{"remove through a linked directory", func() error { return sb.Files.Remove(ctx, "~/d/hostname") }},
		{"read /etc/shadow through a link", func() error { _, err := sb.Files.Read(ctx, "~/notes.txt"); return err }},
		{"list root's home", func() error { _, err := sb.Files.List(ctx, "/root", 1); return err }},
		{"watch root's home", func() error {
			w, err := sb.Files.Watch(ctx, "/root", sdk.WatchOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !sdk.IsPermissionDenied(err) {
				t.Errorf("err = %v, want permission denied", err)
			}
			etcUnchanged(t)
		})
	}

	t.Run("a recursive watch skips what the user may not read", func(t *testing.T) {
		run(t, sb, "mkdir -m 700 /home/user/locked", root)
		w, err := sb.Files.Watch(ctx, "~", sdk.WatchOptions{Recursive: true})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		run(t, sb, "touch /home/user/locked/root-secret-name", root)
		run(t, sb, "touch ~/marker")
		timeout := time.After(30 * time.Second)
		for {
			select {
			case e := <-w.Events():
				if strings.HasPrefix(e.Name, "locked/") {
					t.Errorf("a watch as user reported %s %s inside a directory only root may read", e.Type, e.Name)
				}
				if e.Name != "marker" {
					continue
				}
			case <-timeout:
				t.Fatal("no event for ~/marker")
			}
			break
		}
	})

	t.Run("what the user may do still works", func(t *testing.T) {
		if got, err := sb.Files.Read(ctx, "~/readme"); err != nil || len(got) == 0 {
			t.Errorf("read of a world-readable file through a link: %q, %v", got, err)
		}
		if _, err := sb.Files.Write(ctx, "new/dir/up.txt", []byte("hello")); err != nil {
			t.Fatalf("upload into the home with new parents: %v", err)
		}
		owners := run(t, sb, "stat -c '%U:%G' ~/new ~/new/dir ~/new/dir/up.txt").Stdout
		if owners != "user:user\nuser:user\nuser:user\n" {
			t.Errorf("owners of the upload and its new parents: %q, want user's", owners)
		}
		if got := run(t, sb, "cat ~/mine.txt").Stdout; got != "mine\n" {
			t.Errorf("the user's own file after the refused moves: %q", got)
		}
		if _, err := sb.Files.Write(ctx, "/tmp/shared.txt", []byte("x")); err != nil {
			t.Errorf("upload to /tmp: %v", err)
		}
		if err := sb.Files.Remove(ctx, "~/data.csv"); err != nil {
			t.Errorf("removing the link itself: %v", err)
		}
		etcUnchanged(t)
	})

	t.Run("root writes anywhere", func(t *testing.T) {
		if _, err := sb.Files.Write(ctx, "/etc/tupper-by-root/f", []byte("root's"), root); err != nil {
			t.Fatal(err)
		}
		if got := run(t, sb, "stat -c '%U' /etc/tupper-by-root/f", root).Stdout; got != "root\n" {
			t.Errorf("root's upload belongs to %q", got)
		}
		if got, err := sb.Files.Read(ctx, "/etc/shadow", root); err != nil || !strings.Contains(string(got), "root:") {
			t.Errorf("root's read of /etc/shadow: %v", err)
		}
	})
}
