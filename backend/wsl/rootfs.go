package wsl

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

// What the backend puts into every distribution beside the image.
const (
	// distroDir holds what the backend adds. It is not
	// backend.AgentMountDir's tupper-agent, where the other backends mount
	// the agent: fakewsl runs each distribution with the runc backend,
	// which mounts fakewsl's init there, and the agent must not be hidden
	// by it.
	distroDir = backend.AgentMountDir + "/wsl"
	// distroAgent is the agent's path inside the distribution.
	distroAgent = distroDir + "/tupper-agent"
	// distroStart is the launcher the agent is started through.
	distroStart = distroDir + "/start"
	// wslConfPath is WSL's per-distribution configuration, read when the
	// distribution first starts.
	wslConfPath = "/etc/wsl.conf"
)

// wslConf is the distribution's /etc/wsl.conf (keys from
// src/linux/init/WslDistributionConfig.h of microsoft/WSL): it closes what
// WSL opens between a distribution and Windows. interop runs Windows
// programs from Linux as the Windows user: off, and no Windows PATH.
// automount mounts the Windows drives under /mnt and fstab: off, with the
// ldconfig of Windows' GPU libraries. gpu and guiApplications bring the
// host's GPU and WSLg's display: off. fileServer is \\wsl$, the 9p share
// through which Windows reads the distribution: off. systemd: off, the
// agent is all that runs. The default user is root; the hostname is the
// sandbox's.
func wslConf(hostname string) string {
	return `# Written by Tupper's WSL backend before the distribution first started.
[boot]
systemd=false

[user]
default=root

[interop]
enabled=false
appendWindowsPath=false

[automount]
enabled=false
mountFsTab=false
ldconfig=false

[network]
hostname=` + hostname + `
generateHosts=true
generateResolvConf=true

[gpu]
enabled=false

[general]
guiApplications=false

[fileServer]
enabled=false
`
}

// startScript is the launcher: argv[1] caps every user's tasks
// (RLIMIT_NPROC; bash and busybox call the flag -u, dash -p) unless a
// lower cap holds already, then the rest of argv replaces the shell. WSL
// gives sandboxes no task limit of their own: this one counts a user's
// tasks across the whole WSL VM, and root, who holds CAP_SYS_RESOURCE
// there, passes it.
const startScript = `# Written by Tupper's WSL backend: starts the agent.
# Usage: start TASKS COMMAND [ARG...]
tasks=$1
shift
if [ "$tasks" -gt 0 ]; then
	hard=$(ulimit -H -u 2>/dev/null || ulimit -H -p 2>/dev/null)
	if [ "$hard" = unlimited ] || [ "$hard" -gt "$tasks" ]; then
		ulimit -u "$tasks" 2>/dev/null || ulimit -p "$tasks" 2>/dev/null || {
			echo "tupper: cannot set RLIMIT_NPROC to $tasks" >&2
			exit 125
		}
	fi
fi
exec "$@"
`

// excluded reports whether the image's own entry at name (relative, no
// leading slash) gives way to what the backend adds.
func excluded(name string) bool {
	return name == strings.TrimPrefix(wslConfPath, "/") ||
		name == strings.TrimPrefix(distroDir, "/") || strings.HasPrefix(name, strings.TrimPrefix(distroDir, "/")+"/")
}

// imageInfo describes a cached image tar.
type imageInfo struct {
	// Bytes is what the image's files and directories take on an ext4
	// disk, in its 4 KiB blocks; Entries is how many there are.
	Bytes   int64 `json:"bytes"`
	Entries int64 `json:"entries"`
}

// blockSize is ext4's usual block.
const blockSize = 4096

// distroDiskBytes is the disk size that leaves about disk bytes free
// for the sandbox's writes once the image is on it: ext4 keeps some for
// itself (inode tables, the journal, the 5% only root may use), a
// fifteenth or so, plus 32 MiB.
func distroDiskBytes(img imageInfo, disk int64) int64 {
	return img.Bytes + disk + (img.Bytes+disk)/14 + 32<<20
}

// imageKey names the cached tar of spec's image: its chain id, which
// images with equal layers share, or, for a bare directory, its path.
func imageKey(spec *backend.Spec) string {
	if spec.Image != nil && spec.Image.ChainID != "" {
		_, hex, _ := strings.Cut(spec.Image.ChainID, ":")
		return "chain-" + hex
	}
	sum := sha256.Sum256([]byte(filepath.Clean(spec.RootFS)))
	return "dir-" + hex.EncodeToString(sum[:12])
}

// imageTar returns the cached tar of spec's image under dir, making it
// first if needed. The tar has no end-of-archive marker: the caller
// appends the backend's entries and the marker (see distroTar). The
// caller holds the key's lock.
func imageTar(dir string, spec *backend.Spec) (string, imageInfo, error) {
	key := imageKey(spec)
	tarPath := filepath.Join(dir, key+".tar")
	infoPath := filepath.Join(dir, key+".json")
	var info imageInfo
	if b, err := os.ReadFile(infoPath); err == nil && json.Unmarshal(b, &info) == nil {
		if _, err := os.Stat(tarPath); err == nil {
			return tarPath, info, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", info, err
	}
	tmp, err := os.CreateTemp(dir, key+".tmp-*")
	if err != nil {
		return "", info, err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriterSize(tmp, 1<<20)
	tw := tar.NewWriter(w)
	if spec.Image != nil && len(spec.Image.Layers) > 0 {
		info, err = flattenLayers(tw, spec.Image.Layers)
	} else {
		info, err = tarDir(tw, spec.RootFS)
	}
	if err == nil {
		// Flush, not Close: no end-of-archive marker.
		err = tw.Flush()
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", info, fmt.Errorf("make the image's tar: %w", err)
	}
	if err := os.Rename(tmp.Name(), tarPath); err != nil {
		return "", info, err
	}
	b, _ := json.Marshal(info)
	if err := os.WriteFile(infoPath, b, 0o600); err != nil {
		os.Remove(tarPath)
		return "", info, err
	}
	return tarPath, info, nil
}

// distroEntries returns the tar entries the backend adds to the image and
// the end-of-archive marker: wsl.conf, the launcher and the agent.
func distroEntries(hostname, agentPath string) ([]byte, error) {
	agent, err := os.ReadFile(agentPath)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	dirs := []string{strings.TrimPrefix(backend.AgentMountDir, "/"), strings.TrimPrefix(distroDir, "/")}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: now, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	files := []struct {
		name string
		mode int64
		data []byte
	}{
		{wslConfPath, 0o644, []byte(wslConf(hostname))},
		{distroStart, 0o755, []byte(startScript)},
		{distroAgent, 0o755, agent},
	}
	for _, f := range files {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.name, "/"), Mode: f.mode, Size: int64(len(f.data)), ModTime: now, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// flattenLayers writes the file tree that layers (lowest first) make, as
// one tar: a path's entry comes from the highest layer that has it, and
// whiteouts (".wh.name", ".wh..wh..opq") remove what lower layers put
// there. Entries keep the order of the layers, lowest first, so that a
// directory comes before what a higher layer puts in it.
func flattenLayers(tw *tar.Writer, layers []backend.Layer) (imageInfo, error) {
	// First pass: which layer owns each final path.
	owner := map[string]int{}
	var root *tar.Header
	for i, l := range layers {
		err := eachEntry(l.Path, func(hdr *tar.Header, _ io.Reader) error {
			name, ok := cleanName(hdr.Name)
			if !ok {
				return fmt.Errorf("layer %s: entry %q leaves the root: %w", l.Digest, hdr.Name, errdefs.ErrInvalidArgument)
			}
			if name == "" {
				h := *hdr
				root = &h
				return nil
			}
			dir, base := path.Split(name)
			dir = strings.TrimSuffix(dir, "/")
			switch {
			case base == ".wh..wh..opq":
				removeBelow(owner, dir, i, false)
			case strings.HasPrefix(base, ".wh."):
				removeBelow(owner, path.Join(dir, strings.TrimPrefix(base, ".wh.")), i, true)
			default:
				if hdr.Typeflag != tar.TypeDir {
					removeBelow(owner, name, i, false)
				}
				owner[name] = i
			}
			return nil
		})
		if err != nil {
			return imageInfo{}, err
		}
	}
	// Second pass: write each path from its owner.
	var info imageInfo
	rootHdr := &tar.Header{Typeflag: tar.TypeDir, Mode: 0o755}
	if root != nil {
		rootHdr = root
	}
	if err := writeEntry(tw, rootHdr, "./", nil, &info); err != nil {
		return info, err
	}
	for i, l := range layers {
		err := eachEntry(l.Path, func(hdr *tar.Header, r io.Reader) error {
			name, _ := cleanName(hdr.Name)
			if o, ok := owner[name]; !ok || o != i || name == "" || strings.HasPrefix(path.Base(name), ".wh.") || excluded(name) {
				return nil
			}
			if hdr.Typeflag == tar.TypeLink {
				target, ok := cleanName(hdr.Linkname)
				if !ok || target == "" {
					return fmt.Errorf("layer %s: hard link %q to %q leaves the root: %w", l.Digest, hdr.Name, hdr.Linkname, errdefs.ErrInvalidArgument)
				}
				hdr.Linkname = target
			}
			return writeEntry(tw, hdr, name, r, &info)
		})
		if err != nil {
			return info, err
		}
	}
	return info, nil
}

// removeBelow drops from owner the entries of layers below layer under p,
// and p itself when self is set.
func removeBelow(owner map[string]int, p string, layer int, self bool) {
	prefix := p + "/"
	if p == "" {
		prefix = ""
	}
	for name, l := range owner {
		if l < layer && (strings.HasPrefix(name, prefix) || self && name == p) {
			delete(owner, name)
		}
	}
}

// cleanName makes a tar entry's name relative and clean ("" for the
// root), and reports false when it would leave the root.
func cleanName(name string) (string, bool) {
	c := path.Clean("/" + name)
	if strings.Contains(name, "..") {
		for _, part := range strings.Split(name, "/") {
			if part == ".." {
				return "", false
			}
		}
	}
	return strings.TrimPrefix(c, "/"), true
}

// writeEntry writes hdr under name, with r's content for regular files.
// Owner names are dropped, so that the ids, which the image means, are
// what the distribution gets.
func writeEntry(tw *tar.Writer, hdr *tar.Header, name string, r io.Reader, info *imageInfo) error {
	h := *hdr
	h.Name = name
	if h.Typeflag == tar.TypeDir && !strings.HasSuffix(h.Name, "/") {
		h.Name += "/"
	}
	h.Uname, h.Gname = "", ""
	h.Format = tar.FormatPAX
	if h.Typeflag != tar.TypeReg {
		h.Size = 0
	}
	if err := tw.WriteHeader(&h); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	info.Entries++
	if h.Typeflag == tar.TypeDir {
		info.Bytes += blockSize
	}
	if h.Typeflag == tar.TypeReg && r != nil {
		n, err := io.Copy(tw, r)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		info.Bytes += (n + blockSize - 1) / blockSize * blockSize
	}
	return nil
}

// eachEntry calls fn with every entry of the layer blob at p, which may be
// a plain, gzip or zstd tar.
func eachEntry(p string, fn func(*tar.Header, io.Reader) error) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := decompress(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return fmt.Errorf("layer %s: %w", p, err)
	}
	defer r.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("layer %s: %w", p, err)
		}
		if err := fn(hdr, tr); err != nil {
			return err
		}
	}
}

// decompress reads r as gzip or zstd when its first bytes say so, and as
// it is otherwise.
func decompress(r *bufio.Reader) (io.ReadCloser, error) {
	magic, _ := r.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		return gzip.NewReader(r)
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		d, err := zstd.NewReader(r)
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return io.NopCloser(r), nil
}

// tarDir writes the tree at root (a test's unpacked image) as a tar, in
// lexical order, parents first. Hard links are written as copies; sockets
// are left out, as tar cannot hold them.
func tarDir(tw *tar.Writer, root string) (imageInfo, error) {
	var info imageInfo
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if name == "." {
			name = "./"
		}
		if excluded(name) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		var r io.Reader
		if hdr.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			r = f
		}
		return writeEntry(tw, hdr, name, r, &info)
	})
	return info, err
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
