package testutil

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/lightbearco/tupper/image"
)

// TestImagePackages are the Debian packages in the image TestRootFS returns,
// on top of mmdebstrap's minbase variant of bookworm.
var TestImagePackages = []string{"bash", "coreutils", "python3", "procps", "curl", "ca-certificates", "iproute2", "s3fs", "fuse"}

// testImageRecipe changes whenever the way the test image is made changes,
// so that caches made the old way are not used.
const testImageRecipe = "2"

// testImage is one kind of test image: what it is built from, and the
// repository its names live under in the cache's store.
type testImage struct {
	repo     string
	packages []string
	labels   map[string]string
}

var (
	debianTestImage = testImage{repo: "tupper-test/debian", packages: TestImagePackages}
	// The code-interpreter template as `tupper image build` makes it.
	interpreterTestImage = testImage{
		repo:     "tupper-test/code-interpreter",
		packages: image.Recipes[image.CodeInterpreterTemplate].Packages,
		labels:   image.Recipes[image.CodeInterpreterTemplate].Labels,
	}
)

// testImageBuildTimeout bounds one build of the test image.
const testImageBuildTimeout = 20 * time.Minute

var (
	testRootFSMu    sync.Mutex
	testRootFSPaths = map[string]string{} // by image name
)

// CacheDir returns the directory where tests keep what is expensive to make:
// $TUPPER_CACHE, or $HOME/.cache/tupper.
func CacheDir() string {
	if d := os.Getenv("TUPPER_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "tupper")
	}
	return filepath.Join(os.TempDir(), "tupper-cache")
}

// TestRootFS returns the root filesystem of a small Debian image (bookworm
// minbase with TestImagePackages and the user account, uid 1000, home
// /home/user, shell /bin/bash).
//
// The image is built through the image store (image.Store.BuildDebian) into a
// store under CacheDir()/testimages, once per machine and package list: test
// binaries running in parallel wait for one build, and later runs reuse it.
// The first build takes a minute or so and needs a Debian mirror.
//
// The tree is shared by every test on the machine: never write to it; give
// sandboxes a copy-on-write view. TestRootFS skips the test when not root or
// when mmdebstrap is missing.
func TestRootFS(t testing.TB) string {
	t.Helper()
	return rootFSOf(t, debianTestImage)
}

func rootFSOf(t testing.TB, spec testImage) string {
	t.Helper()
	RequiresRoot(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		Skip(t, "needs mmdebstrap to build the Debian test image: apt-get install mmdebstrap")
	}
	testRootFSMu.Lock()
	defer testRootFSMu.Unlock()
	name := spec.name()
	if p := testRootFSPaths[name]; p != "" {
		return p
	}
	p, err := buildTestImage(t, spec)
	if err != nil {
		t.Fatalf("test image %s: %v", spec.repo, err)
	}
	testRootFSPaths[name] = p
	return p
}

// TestImage is TestRootFS as an image in a store: it returns the root of the
// image store that holds the Debian test image, and the image's name there,
// for tests that run the whole stack (engine, image store, backend). The
// store is shared by every test on the machine; never remove from it.
func TestImage(t testing.TB) (storeRoot, name string) {
	t.Helper()
	TestRootFS(t)
	return filepath.Join(CacheDir(), "testimages", "store"), debianTestImage.name()
}

// InterpreterImage is TestImage for the code-interpreter template: the
// image `tupper image build code-interpreter` makes (its packages and its
// label), built once per machine into the same shared store. The first
// build takes a few minutes.
func InterpreterImage(t testing.TB) (storeRoot, name string) {
	t.Helper()
	rootFSOf(t, interpreterTestImage)
	return filepath.Join(CacheDir(), "testimages", "store"), interpreterTestImage.name()
}

func (spec testImage) name() string {
	parts := append([]string{testImageRecipe, image.DefaultSuite, image.DefaultVariant}, spec.packages...)
	for _, k := range slices.Sorted(maps.Keys(spec.labels)) {
		parts = append(parts, "label:"+k+"="+spec.labels[k])
	}
	h := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return spec.repo + ":" + hex.EncodeToString(h[:])[:12]
}

func buildTestImage(t testing.TB, spec testImage) (string, error) {
	dir := filepath.Join(CacheDir(), "testimages")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	store, err := image.Open(image.Config{Root: filepath.Join(dir, "store")})
	if err != nil {
		return "", err
	}
	name := spec.name()
	ctx, cancel := context.WithTimeout(context.Background(), testImageBuildTimeout)
	defer cancel()
	if img, err := store.Resolve(ctx, name); err == nil {
		return img.RootFS, nil
	}

	// One build per machine: other test binaries wait here, then find it.
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	for {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if img, err := store.Resolve(ctx, name); err == nil {
		return img.RootFS, nil
	}

	t.Logf("building the test image %s into %s (once per machine; a minute or a few)", name, dir)
	start := time.Now()
	var lines []string
	progress := image.ProgressFunc(func(e image.Event) {
		// The counts of packages repeat what the builder's lines say.
		if e.Message != "" && e.Phase != image.PhasePackages {
			lines = append(lines, string(e.Phase)+": "+e.Message)
		}
	})
	img, err := store.BuildDebian(ctx, name, image.BuildOptions{Packages: spec.packages, Labels: spec.labels}, progress)
	if err != nil {
		return "", fmt.Errorf("%w\nbuild log:\n%s", err, strings.Join(lines, "\n"))
	}
	t.Logf("built the test image %s in %s", spec.repo, time.Since(start).Round(time.Second))

	// Drop test images made from other package lists or recipes.
	if imgs, err := store.List(ctx); err == nil {
		for _, other := range imgs {
			for _, n := range other.Names {
				if n != name && strings.HasPrefix(n, spec.repo+":") {
					_ = store.Remove(ctx, n)
				}
			}
		}
	}
	return img.RootFS, nil
}

// busyboxDirs are made in every BusyboxRootFS, with their modes.
var busyboxDirs = []struct {
	path string
	mode os.FileMode
}{
	{"bin", 0o755}, {"sbin", 0o755}, {"usr/bin", 0o755}, {"usr/sbin", 0o755},
	{"etc", 0o755}, {"dev", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"run", 0o755},
	{"tmp", 0o1777}, {"var/tmp", 0o1777}, {"root", 0o700}, {"home/user", 0o755},
}

// BusyboxRootFS returns a fresh, tiny root filesystem made from the host's
// static busybox (package busybox-static): /bin/busybox, a symlink for each
// of its applets (so /bin/sh works), /etc/passwd and /etc/group with root and
// user (uid 1000, home /home/user, shell /bin/sh), and the usual empty
// directories. It takes milliseconds; each call makes a new tree in a
// directory of t's, which the test may write to. It skips the test if no
// static busybox is installed.
func BusyboxRootFS(t testing.TB) string {
	t.Helper()
	bb := "/bin/busybox"
	if _, err := os.Stat(bb); err != nil {
		if bb, err = exec.LookPath("busybox"); err != nil {
			t.Skip("needs a static busybox: apt-get install busybox-static")
		}
	}
	if static, err := isStatic(bb); err != nil || !static {
		t.Skipf("needs a static busybox, and %s is not one (%v): apt-get install busybox-static", bb, err)
	}
	root := t.TempDir()
	if err := makeBusyboxRootFS(root, bb); err != nil {
		t.Fatalf("busybox root filesystem: %v", err)
	}
	return root
}

func makeBusyboxRootFS(root, bb string) error {
	if err := os.Chmod(root, 0o755); err != nil {
		return err
	}
	for _, d := range busyboxDirs {
		p := filepath.Join(root, d.path)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
	}
	if err := copyFile(filepath.Join(root, "bin", "busybox"), bb, 0o755); err != nil {
		return err
	}
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("%s --list-full: %w", bb, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		applet := strings.TrimSpace(sc.Text())
		if applet == "" || applet == "bin/busybox" || strings.Contains(applet, "..") {
			continue
		}
		p := filepath.Join(root, applet)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("/bin/busybox", p); err != nil && !os.IsExist(err) {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n" +
			"user:x:1000:1000::/home/user:/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group": "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n",
		"etc/hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
	}
	for p, content := range files {
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(filepath.Join(root, "home", "user"), 1000, 1000); err != nil {
			return err
		}
	}
	return nil
}

// isStatic reports whether the ELF executable at path needs no dynamic loader.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

func copyFile(dst, src string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// LabelledImage returns the name of an image of repo in the shared test
// store at storeRoot: base with labels added to its config (no new layer),
// committed once per machine; a new base or new labels make a new one, and
// repo's older ones go. Tests make templates with a start command so.
func LabelledImage(t testing.TB, storeRoot, base, repo string, labels map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	store, err := image.Open(image.Config{Root: storeRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sum := sha256.New()
	sum.Write([]byte(base))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		sum.Write([]byte("\n" + k + "=" + labels[k]))
	}
	name := repo + ":" + hex.EncodeToString(sum.Sum(nil))[:12]
	if _, err := store.Resolve(ctx, name); err == nil {
		return name
	}
	_, err = store.Commit(ctx, image.CommitOptions{
		Parent: base, CreatedBy: "labels (a test's)", Names: []string{name}, Unpack: true,
		Edit: func(c *v1.Config) {
			c.Labels = maps.Clone(c.Labels)
			if c.Labels == nil {
				c.Labels = map[string]string{}
			}
			maps.Copy(c.Labels, labels)
		},
	})
	if err != nil {
		t.Fatalf("commit the test image %s: %v", name, err)
	}
	if imgs, err := store.List(ctx); err == nil {
		for _, img := range imgs {
			for _, n := range img.Names {
				if n != name && strings.HasPrefix(n, repo+":") {
					_ = store.Remove(ctx, n)
				}
			}
		}
	}
	return name
}
