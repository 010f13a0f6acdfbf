package firecracker

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// initramfsRecipe changes whenever what writeInitramfs puts in the archive
// changes, so that archives cached the old way are not used.
const initramfsRecipe = "1"

// The initramfs's layout, as the agent's init (cmd/tupper-agent,
// vminit_linux.go) expects it.
const (
	initPath        = "/init"
	modulesDir      = "/modules"
	moduleOrderFile = "/modules/order"
)

// writeInitramfs writes the guest's initramfs to w: the agent as /init,
// the kernel modules in mods (in load order) under /modules with
// /modules/order naming them, /dev/console for init's output, and the
// directories init mounts on. It is a "newc" cpio archive, uncompressed:
// the kernel unpacks that fastest, and the agent compresses badly anyway.
func writeInitramfs(w io.Writer, agent string, mods []kernelModule) error {
	cw := &cpioWriter{w: w}
	for _, d := range []string{"/dev", "/proc", "/sys", "/mnt", "/newroot"} {
		if err := cw.dir(d, 0o755); err != nil {
			return err
		}
	}
	// The kernel opens /dev/console of the initramfs for init's standard
	// input, output and error before init could mount anything.
	if err := cw.charDev("/dev/console", 0o600, 5, 1); err != nil {
		return err
	}
	if err := cw.copyFile(initPath, 0o755, agent); err != nil {
		return err
	}
	if len(mods) > 0 {
		if err := cw.dir(modulesDir, 0o755); err != nil {
			return err
		}
		var order strings.Builder
		for _, m := range mods {
			base := filepath.Base(m.Path)
			if err := cw.copyFile(modulesDir+"/"+base, 0o644, m.Path); err != nil {
				return err
			}
			order.WriteString(base + "\n")
		}
		if err := cw.file(moduleOrderFile, 0o644, strings.NewReader(order.String()), int64(order.Len())); err != nil {
			return err
		}
	}
	return cw.close()
}

// initramfsKey names the initramfs of agent and mods in the cache: it
// changes with the recipe and with the content of any of them.
func initramfsKey(agentSum string, mods []kernelModule) string {
	h := sha256.New()
	fmt.Fprintf(h, "recipe %s\nagent %s\n", initramfsRecipe, agentSum)
	for _, m := range mods {
		fmt.Fprintf(h, "module %s %s\n", filepath.Base(m.Path), m.Sum)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// cpioWriter writes a cpio archive in the "newc" format of the kernel's
// initramfs (Documentation/driver-api/early-userspace/buffer-format.rst):
// each entry a 110-byte header of hexadecimal fields, its NUL-ended name
// and its data, both padded to 4 bytes; the archive ends with an entry
// named TRAILER!!!.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	off int64
	err error
}

// Kinds of entry, as in st_mode.
const (
	cpioDir  = 0o040000
	cpioFile = 0o100000
	cpioChar = 0o020000
)

func (c *cpioWriter) dir(name string, perm uint32) error {
	return c.entry(name, cpioDir|perm, 2, 0, 0, nil, 0)
}

func (c *cpioWriter) charDev(name string, perm, major, minor uint32) error {
	return c.entry(name, cpioChar|perm, 1, major, minor, nil, 0)
}

func (c *cpioWriter) file(name string, perm uint32, r io.Reader, size int64) error {
	return c.entry(name, cpioFile|perm, 1, 0, 0, r, size)
}

func (c *cpioWriter) copyFile(name string, perm uint32, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	return c.file(name, perm, f, fi.Size())
}

// close writes the trailer.
func (c *cpioWriter) close() error {
	return c.entry("TRAILER!!!", 0, 1, 0, 0, nil, 0)
}

func (c *cpioWriter) entry(name string, mode, nlink, rmajor, rminor uint32, r io.Reader, size int64) error {
	if c.err != nil {
		return c.err
	}
	if size > 0xFFFFFFFF {
		return fmt.Errorf("cpio: %s: %d bytes is past the format's 4 GiB", name, size)
	}
	name = strings.TrimPrefix(name, "/")
	c.ino++
	// The fields: ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize (with the NUL), check.
	// Owners are root and times zero: the archive is the same for the
	// same content.
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rmajor, rminor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad()
	if r != nil {
		n, err := io.Copy(c.w, io.LimitReader(r, size))
		c.off += n
		if err == nil && n != size {
			err = fmt.Errorf("cpio: %s: %d bytes written of %d", name, n, size)
		}
		if err != nil && c.err == nil {
			c.err = err
		}
	}
	c.pad()
	return c.err
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.off += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if rem := c.off % 4; rem != 0 {
		c.write(make([]byte, 4-rem))
	}
}

// kernelModule is a loadable kernel module file.
type kernelModule struct {
	// Name is the module's name ("virtio_blk").
	Name string
	// Path is the .ko file.
	Path string
	// Depends are the names of the modules it needs loaded first.
	Depends []string
	// Sum is the SHA-256 of the file, hex.
	Sum string
}

// readModule reads a module's name and dependencies from its .modinfo
// section, NUL-separated key=value strings that modinfo(8) prints.
func readModule(path string) (kernelModule, error) {
	f, err := elf.Open(path)
	if err != nil {
		return kernelModule{}, fmt.Errorf("kernel module %s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return kernelModule{}, fmt.Errorf("kernel module %s: no .modinfo section", path)
	}
	info, err := sec.Data()
	if err != nil {
		return kernelModule{}, fmt.Errorf("kernel module %s: .modinfo: %w", path, err)
	}
	m := kernelModule{Path: path, Name: moduleName(strings.TrimSuffix(filepath.Base(path), ".ko"))}
	for _, kv := range bytes.Split(info, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			continue
		}
		switch k {
		case "name":
			m.Name = moduleName(v)
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d != "" {
					m.Depends = append(m.Depends, moduleName(d))
				}
			}
		}
	}
	sum, err := fileSum(path)
	if err != nil {
		return kernelModule{}, err
	}
	m.Sum = sum
	return m, nil
}

// moduleName normalizes a module name: the kernel treats '-' and '_' alike.
func moduleName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// readModules reads every .ko file in dir and returns the modules in an
// order in which each comes after those it depends on (by name, where
// the dependencies leave a choice). A module that needs one that is not in
// dir is an error: the guest would fail to load it. A missing dir means no
// modules.
func readModules(dir string) ([]kernelModule, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	byName := map[string]kernelModule{}
	var names []string
	for _, e := range entries {
		switch {
		case !strings.HasSuffix(e.Name(), ".ko") && strings.Contains(e.Name(), ".ko."):
			return nil, fmt.Errorf("kernel module %s: compressed modules are not supported; decompress it", filepath.Join(dir, e.Name()))
		case !strings.HasSuffix(e.Name(), ".ko") || e.IsDir():
			continue
		}
		m, err := readModule(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if prev, dup := byName[m.Name]; dup {
			return nil, fmt.Errorf("kernel module %s: %s is %s too", m.Path, m.Name, prev.Path)
		}
		byName[m.Name] = m
		names = append(names, m.Name)
	}
	slices.Sort(names)
	const (
		unseen = iota
		visiting
		done
	)
	state := map[string]int{}
	var out []kernelModule
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		switch state[name] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("kernel modules depend on each other in a cycle: %s", strings.Join(append(chain, name), " → "))
		}
		m, ok := byName[name]
		if !ok {
			return fmt.Errorf("kernel module %s needs %s, which is not in %s", chain[len(chain)-1], name, dir)
		}
		state[name] = visiting
		deps := slices.Sorted(slices.Values(m.Depends))
		for _, d := range deps {
			if err := visit(d, append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = done
		out = append(out, m)
		return nil
	}
	for _, n := range names {
		if err := visit(n, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fileSum returns the SHA-256 of the file at path, hex.
func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
