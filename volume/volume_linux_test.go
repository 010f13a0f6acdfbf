package volume_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/volume"
)

// newVolume makes a volume of size bytes for the test and removes it at
// its end.
func newVolume(t *testing.T, size int64) string {
	t.Helper()
	testutil.RequiresRoot(t)
	dir := filepath.Join(t.TempDir(), "vol")
	if err := volume.Create(context.Background(), dir, size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := volume.Remove(dir); err != nil {
			t.Errorf("remove volume: %v", err)
		}
	})
	return dir
}

func openFS(t *testing.T, dir string) *volume.FS {
	t.Helper()
	f, err := volume.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func u32(v uint32) *uint32 { return &v }

func TestCreateMakesAWritableTop(t *testing.T) {
	dir := newVolume(t, 32<<20)
	fi, err := os.Stat(volume.DataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o777 {
		t.Errorf("top mode %v, want 0777: every user of every sandbox may write there", fi.Mode())
	}
	e, err := openFS(t, dir).Stat("/")
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != volume.TypeDirectory || e.UID != volume.DefaultUID || e.GID != volume.DefaultGID {
		t.Errorf("top is %+v, want a directory owned by %d:%d", e, volume.DefaultUID, volume.DefaultGID)
	}
	u, err := volume.UsageOf(dir)
	if err != nil {
		t.Fatal(err)
	}
	if u.Size > 32<<20 || u.Size < 24<<20 || u.Free <= 0 {
		t.Errorf("usage %+v of a 32 MiB volume", u)
	}
}

func TestCreateRefusesTooSmall(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := filepath.Join(t.TempDir(), "vol")
	if err := volume.Create(context.Background(), dir, 1<<20); err == nil {
		t.Fatal("a 1 MiB volume was made")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed create left %s (%v)", dir, err)
	}
}

// TestContentSurvivesUnmount: what a volume holds is in its disk file,
// mounted again after a restart (or a host's reboot).
func TestContentSurvivesUnmount(t *testing.T) {
	dir := newVolume(t, 32<<20)
	f := openFS(t, dir)
	if _, err := f.Write("/keep/me.txt", strings.NewReader("still here"), volume.Attrs{}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := volume.Unmount(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(volume.DataDir(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the data directory of an unmounted volume exists (%v): a sandbox would write uncapped to the host", err)
	}
	if _, err := volume.Open(dir); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("open of an unmounted volume: %v, want unavailable", err)
	}
	if err := volume.Mount(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if err := volume.Mount(context.Background(), dir); err != nil {
		t.Fatalf("a second mount: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(volume.DataDir(dir), "keep/me.txt"))
	if err != nil || string(got) != "still here" {
		t.Fatalf("after a remount: %q, %v", got, err)
	}
}

// TestWritePastTheCap: an upload larger than the volume fails as full and
// leaves the file it would have replaced, and no part of itself.
func TestWritePastTheCap(t *testing.T) {
	dir := newVolume(t, 32<<20)
	f := openFS(t, dir)
	if _, err := f.Write("/big.bin", strings.NewReader("old"), volume.Attrs{}); err != nil {
		t.Fatal(err)
	}
	_, err := f.Write("/big.bin", io.LimitReader(zeros{}, 64<<20), volume.Attrs{})
	if !volume.IsFull(err) || !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("a 64 MiB write to a 32 MiB volume: %v, want full", err)
	}
	got, err := os.ReadFile(filepath.Join(volume.DataDir(dir), "big.bin"))
	if err != nil || string(got) != "old" {
		t.Errorf("the file after a failed write: %q, %v; want the old content", got, err)
	}
	list, err := f.List("/", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("the volume holds %v, want big.bin alone", list)
	}
	u, _ := volume.UsageOf(dir)
	if u.Used > 8<<20 {
		t.Errorf("%d bytes still used after the failed write", u.Used)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestContentOperations(t *testing.T) {
	dir := newVolume(t, 32<<20)
	f := openFS(t, dir)

	if _, err := f.MakeDir("/a/b", volume.Attrs{}, false); !errdefs.IsNotFound(err) {
		t.Errorf("mkdir without parents under a missing one: %v, want not found", err)
	}
	e, err := f.MakeDir("/a/b", volume.Attrs{Mode: u32(0o750), UID: u32(0), GID: u32(0)}, true)
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != volume.TypeDirectory || e.Mode != 0o750 || e.UID != 0 || e.Path != "/a/b" || e.Name != "b" {
		t.Errorf("made %+v", e)
	}
	if _, err := f.MakeDir("/a/b", volume.Attrs{}, false); !errdefs.IsAlreadyExists(err) {
		t.Errorf("mkdir of an existing directory: %v, want already exists", err)
	}
	if _, err := f.MakeDir("a/b", volume.Attrs{}, true); err != nil {
		t.Errorf("mkdir -p of an existing directory: %v", err)
	}
	// ".." never climbs above the top.
	e, err = f.Write("../../../a/b/../c.txt", strings.NewReader("hello"), volume.Attrs{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Path != "/a/c.txt" || e.Size != 5 || e.Mode != 0o644 || e.UID != volume.DefaultUID || e.Type != volume.TypeFile {
		t.Errorf("wrote %+v", e)
	}
	if _, err := os.Stat(filepath.Join(volume.DataDir(dir), "a/c.txt")); err != nil {
		t.Errorf("the file is not where the path says: %v", err)
	}
	// Replacing keeps the owner and mode.
	if _, err := f.SetAttrs("/a/c.txt", volume.Attrs{Mode: u32(0o600), UID: u32(42)}); err != nil {
		t.Fatal(err)
	}
	e, err = f.Write("/a/c.txt", strings.NewReader("hello again"), volume.Attrs{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Mode != 0o600 || e.UID != 42 || e.GID != volume.DefaultGID || e.Size != 11 {
		t.Errorf("replaced %+v, want mode 0600, uid 42, 11 bytes", e)
	}
	r, e, err := f.Read("/a/c.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "hello again" || e.Size != 11 {
		t.Errorf("read %q (%+v)", got, e)
	}
	if _, _, err := f.Read("/a"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("read of a directory: %v, want invalid argument", err)
	}
	if _, _, err := f.Read("/nope"); !errdefs.IsNotFound(err) {
		t.Errorf("read of a missing file: %v, want not found", err)
	}
	if _, err := f.Write("/a", strings.NewReader("x"), volume.Attrs{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("write over a directory: %v, want invalid argument", err)
	}

	list, err := f.List("/", 3)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range list {
		paths = append(paths, e.Path+":"+string(e.Type))
	}
	if diff := cmp.Diff([]string{"/a:directory", "/a/b:directory", "/a/c.txt:file"}, paths); diff != "" {
		t.Errorf("list -want +got:\n%s", diff)
	}
	list, err = f.List("/", 1)
	if err != nil || len(list) != 1 {
		t.Errorf("list depth 1: %v, %v", list, err)
	}
	if _, err := f.List("/a/c.txt", 1); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("list of a file: %v, want invalid argument", err)
	}
	if _, err := f.List("/", volume.MaxListDepth+1); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("list too deep: %v, want invalid argument", err)
	}

	for _, a := range []volume.Attrs{{Mode: u32(0o4755)}, {Mode: u32(0o2755)}, {UID: u32(1 << 31)}} {
		if _, err := f.SetAttrs("/a/c.txt", a); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("set %+v: %v, want invalid argument", a, err)
		}
	}
	if err := f.Remove("/"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("remove /: %v, want invalid argument", err)
	}
	if err := f.Remove("/a"); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove("/a"); !errdefs.IsNotFound(err) {
		t.Errorf("second remove: %v, want not found", err)
	}
	if _, err := f.Stat("/a"); !errdefs.IsNotFound(err) {
		t.Errorf("stat of a removed directory: %v", err)
	}
	if _, err := f.Stat("x\x00y"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a path with NUL: %v, want invalid argument", err)
	}
}

// TestPlantedLinksStayInside: links a sandbox leaves in a volume (to the
// host's /etc, above the top, to a directory outside) let no call read,
// write, change or remove anything outside the volume; links inside it
// work.
func TestPlantedLinksStayInside(t *testing.T) {
	dir := newVolume(t, 32<<20)
	data := volume.DataDir(dir)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(data, name)); err != nil {
			t.Fatal(err)
		}
	}
	plant("/etc", "etc")
	plant(outside, "out")
	plant(secret, "secret")
	plant(secret, "secret2")
	plant("../../../../../../../../"+strings.TrimPrefix(outside, "/"), "up")
	if err := os.WriteFile(filepath.Join(data, "inside.txt"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	plant("inside.txt", "good")
	f := openFS(t, dir)

	for _, p := range []string{"/etc/passwd", "/out/secret", "/secret", "/up/secret"} {
		if r, _, err := f.Read(p); err == nil {
			got, _ := io.ReadAll(r)
			r.Close()
			t.Errorf("read %s through a planted link: %q", p, got)
		} else if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("read %s: %v, want invalid argument", p, err)
		}
	}
	for _, p := range []string{"/out/new", "/secret", "/up/new", "/etc/tupper-was-here"} {
		if _, err := f.Write(p, strings.NewReader("pwned"), volume.Attrs{}); err == nil && p != "/secret" {
			t.Errorf("write %s through a planted link succeeded", p)
		}
	}
	if _, err := f.MakeDir("/out/newdir", volume.Attrs{}, true); err == nil {
		t.Error("mkdir through a planted link succeeded")
	}
	if _, err := f.List("/out", 1); err == nil {
		t.Error("list through a planted link succeeded")
	}
	if _, err := f.SetAttrs("/out/secret", volume.Attrs{Mode: u32(0o666)}); err == nil {
		t.Error("chmod through a planted link succeeded")
	}
	if _, err := f.SetAttrs("/secret2", volume.Attrs{Mode: u32(0o666)}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("chmod of a link: %v, want invalid argument", err)
	}
	if e, err := f.SetAttrs("/secret2", volume.Attrs{UID: u32(4242)}); err != nil || e.UID != 4242 || e.Type != volume.TypeSymlink {
		t.Errorf("chown of a link itself: %+v, %v", e, err)
	}
	// A write to a link's path replaces the link, inside the volume.
	if e, err := f.Stat("/secret"); err != nil || e.Type != volume.TypeFile {
		t.Errorf("after a write to a link's path: %+v, %v; want a file of the volume's", e, err)
	}
	if err := f.Remove("/out/secret"); err == nil {
		t.Error("remove through a planted link succeeded")
	}
	if err := f.Remove("/out"); err != nil {
		t.Errorf("remove of the link itself: %v", err)
	}
	if err := f.Remove("/etc"); err != nil {
		t.Errorf("remove of the link itself: %v", err)
	}

	// Outside is as it was.
	fi, err := os.Lstat(secret)
	if err != nil {
		t.Fatalf("the outside file: %v", err)
	}
	got, _ := os.ReadFile(secret)
	if string(got) != "host secret" || fi.Mode().Perm() != 0o600 {
		t.Errorf("the outside file changed: %q %v", got, fi.Mode())
	}
	if owner := fi.Sys().(*syscall.Stat_t).Uid; owner != 0 {
		t.Errorf("the outside file's owner is %d", owner)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Errorf("the outside directory holds %v", entries)
	}
	if _, err := os.Stat("/etc/tupper-was-here"); err == nil {
		os.Remove("/etc/tupper-was-here")
		t.Error("a write reached the host's /etc")
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("/etc/passwd: %v", err)
	}

	// A FIFO where a file is expected neither hangs a read nor is read.
	if err := syscall.Mkfifo(filepath.Join(data, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Read("/fifo"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("read of a FIFO: %v, want invalid argument", err)
	}

	// Links within the volume are fine.
	r, _, err := f.Read("/good")
	if err != nil {
		t.Fatalf("read through a link inside the volume: %v", err)
	}
	got, _ = io.ReadAll(r)
	r.Close()
	if !bytes.Equal(got, []byte("inside")) {
		t.Errorf("read %q through a link inside", got)
	}
	e, err := f.Stat("/good")
	if err != nil || e.Type != volume.TypeSymlink || e.Target != "inside.txt" {
		t.Errorf("stat of a link: %+v, %v", e, err)
	}
}
