package e2e

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestDist runs `scripts/dist.sh` as `make dist` does and checks what a
// user downloads: an archive per platform whose sum is in SHA256SUMS,
// holding tupper for that platform, the static linux agent its sandboxes
// run, and the README; the linux/amd64 tupper runs and says its version.
func TestDist(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("scripts/dist.sh", out)
	cmd.Dir = testutil.ModuleRoot()
	cmd.Env = append(os.Environ(), "VERSION=v0.0.0-test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/dist.sh: %v\n%s", err, b)
	}

	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		exe     string
		machine elf.Machine // of the agent
	}{
		"tupper-v0.0.0-test-linux-amd64.tar.gz":   {"tupper", elf.EM_X86_64},
		"tupper-v0.0.0-test-linux-arm64.tar.gz":   {"tupper", elf.EM_AARCH64},
		"tupper-v0.0.0-test-darwin-arm64.tar.gz":  {"tupper", elf.EM_AARCH64},
		"tupper-v0.0.0-test-windows-amd64.tar.gz": {"tupper.exe", elf.EM_X86_64},
	}
	sc := bufio.NewScanner(strings.NewReader(string(sums)))
	seen := 0
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		w, ok := want[name]
		if !ok {
			t.Errorf("SHA256SUMS names %s, which is not a release archive", name)
			continue
		}
		seen++
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s: sum does not match SHA256SUMS", name)
		}
		dir := filepath.Join(t.TempDir(), "x")
		files := untar(t, filepath.Join(out, name), dir)
		base := strings.TrimSuffix(name, ".tar.gz")
		for _, f := range []string{w.exe, "tupper-agent", "README.md"} {
			if !files[base+"/"+f] {
				t.Errorf("%s lacks %s (it has %v)", name, f, files)
			}
		}
		agent := filepath.Join(dir, base, "tupper-agent")
		ef, err := elf.Open(agent)
		if err != nil {
			t.Fatalf("%s: the agent is not an ELF binary: %v", name, err)
		}
		static := true
		for _, p := range ef.Progs {
			static = static && p.Type != elf.PT_INTERP
		}
		if ef.Machine != w.machine || !static {
			t.Errorf("%s: the agent is %v (static %v), want a static %v binary", name, ef.Machine, static, w.machine)
		}
		ef.Close()
		if strings.Contains(name, "linux-amd64") {
			v, err := exec.Command(filepath.Join(dir, base, "tupper"), "version").Output()
			if err != nil || !strings.HasPrefix(string(v), "tupper v0.0.0-test ") {
				t.Errorf("the released tupper says %q, %v; want its version", v, err)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("SHA256SUMS lists %d of the %d archives:\n%s", seen, len(want), sums)
	}
}

// untar unpacks a .tar.gz into dir and returns the names of its files.
func untar(t *testing.T, archive, dir string) map[string]bool {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		files[h.Name] = true
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("%s: entry %q leaves the archive's directory", archive, h.Name)
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode)&0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
}
