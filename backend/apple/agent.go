package apple

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// agentDir is the directory every container mounts at /.tupper: it holds
// one file, tupper-agent, a copy of the agent binary. A directory rather
// than the binary itself, since `container` binds single files
// unreliably (apple/container#1251); a copy, so that the mount shows
// nothing else of the host. The copy is replaced, by rename, when the
// agent changes; running containers keep the one they started with.
type agentDir struct {
	dir  string
	arch string

	mu sync.Mutex
	// src is the agent last copied, as it was then; its content's digest
	// is what the directory holds.
	src     fileStamp
	checked map[fileStamp]error // agents already looked at
}

// fileStamp identifies a file's content cheaply: a changed file gets a new
// stamp.
type fileStamp struct {
	path  string
	size  int64
	mtime time.Time
}

// ensure makes the directory hold the agent at path, after checking that
// it is a static linux binary for the containers' architecture, and
// returns the directory.
func (a *agentDir) ensure(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("the agent binary: %w", err)
	}
	stamp := fileStamp{path: path, size: st.Size(), mtime: st.ModTime()}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.checked == nil {
		a.checked = map[fileStamp]error{}
	}
	cerr, seen := a.checked[stamp]
	if !seen {
		cerr = checkAgent(path, a.arch)
		a.checked[stamp] = cerr
	}
	if cerr != nil {
		return "", cerr
	}
	if a.src == stamp {
		return a.dir, nil
	}
	dst := filepath.Join(a.dir, "tupper-agent")
	if same, err := sameContent(path, dst); err != nil {
		return "", err
	} else if !same {
		if err := copyExecutable(path, dst); err != nil {
			return "", fmt.Errorf("copy the agent into %s: %w", a.dir, err)
		}
	}
	a.src = stamp
	return a.dir, nil
}

// elfMachines are the ELF machines of the containers' architectures.
var elfMachines = map[string]elf.Machine{"arm64": elf.EM_AARCH64, "amd64": elf.EM_X86_64}

// checkAgent checks that path is a static 64-bit linux executable for arch.
func checkAgent(path, arch string) error {
	fix := fmt.Sprintf("the containers run linux/%s, so the agent must be tupper-agent built with GOOS=linux GOARCH=%s CGO_ENABLED=0 (`make dist` puts it beside tupper in the darwin archive; or set the backend option agent=PATH)", arch, arch)
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("the agent %s is no linux executable (%v): %s: %w", path, err, fix, errdefs.ErrInvalidArgument)
	}
	defer f.Close()
	if want := elfMachines[arch]; f.Machine != want || f.Class != elf.ELFCLASS64 {
		return fmt.Errorf("the agent %s is built for %v, not %v: %s: %w", path, f.Machine, want, fix, errdefs.ErrInvalidArgument)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("the agent %s is dynamically linked, and the image may lack its loader: %s: %w", path, fix, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// sameContent reports whether the files a and b hold the same bytes; a
// missing b is not the same.
func sameContent(a, b string) (bool, error) {
	sb, err := os.Stat(b)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	if sa.Size() != sb.Size() {
		return false, nil
	}
	da, err := fileDigest(a)
	if err != nil {
		return false, err
	}
	db, err := fileDigest(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(da, db), nil
}

func fileDigest(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// copyExecutable copies src to dst as a 0755 file, atomically.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tupper-agent-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
