package firecracker

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeModule writes a minimal relocatable ELF file with a .modinfo
// section, which is all of a kernel module that readModule reads.
func writeModule(t *testing.T, dir, file string, info ...string) string {
	t.Helper()
	modinfo := []byte(strings.Join(info, "\x00") + "\x00")
	shstrtab := []byte("\x00.modinfo\x00.shstrtab\x00")
	var b bytes.Buffer
	le := binary.LittleEndian
	shoff := 64 + len(modinfo) + len(shstrtab)
	// The ELF header: 64-bit, little-endian, ET_REL, x86-64.
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	binary.Write(&b, le, uint16(1))     // e_type
	binary.Write(&b, le, uint16(62))    // e_machine
	binary.Write(&b, le, uint32(1))     // e_version
	binary.Write(&b, le, uint64(0))     // e_entry
	binary.Write(&b, le, uint64(0))     // e_phoff
	binary.Write(&b, le, uint64(shoff)) // e_shoff
	binary.Write(&b, le, uint32(0))     // e_flags
	binary.Write(&b, le, uint16(64))    // e_ehsize
	binary.Write(&b, le, uint16(0))     // e_phentsize
	binary.Write(&b, le, uint16(0))     // e_phnum
	binary.Write(&b, le, uint16(64))    // e_shentsize
	binary.Write(&b, le, uint16(3))     // e_shnum
	binary.Write(&b, le, uint16(2))     // e_shstrndx
	b.Write(modinfo)
	b.Write(shstrtab)
	section := func(name, typ uint32, off, size int) {
		binary.Write(&b, le, name)
		binary.Write(&b, le, typ)
		binary.Write(&b, le, uint64(0)) // flags
		binary.Write(&b, le, uint64(0)) // addr
		binary.Write(&b, le, uint64(off))
		binary.Write(&b, le, uint64(size))
		binary.Write(&b, le, uint32(0)) // link
		binary.Write(&b, le, uint32(0)) // info
		binary.Write(&b, le, uint64(1)) // addralign
		binary.Write(&b, le, uint64(0)) // entsize
	}
	section(0, 0, 0, 0)
	section(1, 1, 64, len(modinfo))                // .modinfo, PROGBITS
	section(10, 3, 64+len(modinfo), len(shstrtab)) // .shstrtab, STRTAB
	p := filepath.Join(dir, file)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// virtioModules writes the modules Debian's cloud kernel needs for a
// Firecracker guest, with their real dependencies.
func virtioModules(t *testing.T) string {
	dir := t.TempDir()
	for file, deps := range map[string]string{
		"virtio.ko":                            "",
		"virtio_ring.ko":                       "",
		"virtio_mmio.ko":                       "virtio,virtio_ring",
		"virtio_blk.ko":                        "virtio,virtio_ring",
		"vsock.ko":                             "",
		"vmw_vsock_virtio_transport_common.ko": "vsock",
		"vmw_vsock_virtio_transport.ko":        "vmw_vsock_virtio_transport_common,virtio,virtio_ring,vsock",
		"overlay.ko":                           "",
	} {
		writeModule(t, dir, file, "license=GPL", "depends="+deps, "name="+strings.TrimSuffix(file, ".ko"), "vermagic=6.1.0-57-cloud-amd64 SMP mod_unload modversions")
	}
	return dir
}

func names(mods []kernelModule) []string {
	var out []string
	for _, m := range mods {
		out = append(out, m.Name)
	}
	return out
}

func TestReadModules(t *testing.T) {
	mods, err := readModules(virtioModules(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"overlay", "virtio", "virtio_ring", "virtio_blk", "virtio_mmio", "vsock",
		"vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport",
	}
	if d := cmp.Diff(want, names(mods)); d != "" {
		t.Errorf("load order (-want +got):\n%s", d)
	}
	for _, m := range mods {
		if len(m.Sum) != 64 || !filepath.IsAbs(m.Path) {
			t.Errorf("module %+v", m)
		}
	}
}

func TestReadModulesErrors(t *testing.T) {
	t.Run("missing dependency", func(t *testing.T) {
		dir := t.TempDir()
		writeModule(t, dir, "virtio_blk.ko", "depends=virtio", "name=virtio_blk")
		if _, err := readModules(dir); err == nil || !strings.Contains(err.Error(), "virtio_blk needs virtio") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("cycle", func(t *testing.T) {
		dir := t.TempDir()
		writeModule(t, dir, "a.ko", "depends=b", "name=a")
		writeModule(t, dir, "b.ko", "depends=a", "name=b")
		if _, err := readModules(dir); err == nil || !strings.Contains(err.Error(), "cycle") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("dashes and underscores", func(t *testing.T) {
		dir := t.TempDir()
		writeModule(t, dir, "nd_virtio.ko", "depends=", "name=nd_virtio")
		writeModule(t, dir, "virtio-pmem.ko", "depends=nd-virtio")
		mods, err := readModules(dir)
		if err != nil || !slices.Equal(names(mods), []string{"nd_virtio", "virtio_pmem"}) {
			t.Errorf("modules %v, %v", names(mods), err)
		}
	})
	t.Run("compressed", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "virtio.ko.xz"), []byte("xz"), 0o644)
		if _, err := readModules(dir); err == nil || !strings.Contains(err.Error(), "compressed") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("not ELF", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "virtio.ko"), []byte("not a module"), 0o644)
		if _, err := readModules(dir); err == nil {
			t.Error("no error")
		}
	})
	t.Run("no directory", func(t *testing.T) {
		if mods, err := readModules(filepath.Join(t.TempDir(), "modules")); err != nil || mods != nil {
			t.Errorf("= %v, %v; want none", mods, err)
		}
	})
}

// cpioEntry is one entry of a newc archive as the kernel reads it.
type cpioEntry struct {
	Name         string
	Mode, NLink  uint32
	RMaj, RMin   uint32
	UID, GID     uint32
	Data         string
	HeaderOffset int
}

// readCPIO parses a newc archive strictly: magic, hexadecimal fields,
// 4-byte alignment of names and data, the trailer last.
func readCPIO(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	align := func() {
		for off%4 != 0 {
			if b[off] != 0 {
				t.Fatalf("padding at %d is not zero", off)
			}
			off++
		}
	}
	for {
		if off+110 > len(b) {
			t.Fatalf("archive ends at %d without a trailer", off)
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			t.Fatalf("magic %q at %d", h[:6], off)
		}
		f := func(i int) uint32 {
			n, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				t.Fatalf("field %d at %d: %v", i, off, err)
			}
			return uint32(n)
		}
		e := cpioEntry{Mode: f(1), UID: f(2), GID: f(3), NLink: f(4), RMaj: f(9), RMin: f(10), HeaderOffset: off}
		size, namesize := int(f(6)), int(f(11))
		off += 110
		name := b[off : off+namesize]
		if name[namesize-1] != 0 {
			t.Fatalf("name at %d not NUL-ended", off)
		}
		e.Name = string(name[:namesize-1])
		off += namesize
		align()
		e.Data = string(b[off : off+size])
		off += size
		align()
		if e.Name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, e)
	}
}

func TestWriteInitramfs(t *testing.T) {
	agent := filepath.Join(t.TempDir(), "tupper-agent")
	// An odd length, so that the padding after it shows.
	os.WriteFile(agent, []byte("#!agent binary\x00\x01\x02"), 0o755)
	mods, err := readModules(virtioModules(t))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeInitramfs(&buf, agent, mods); err != nil {
		t.Fatal(err)
	}
	entries := readCPIO(t, buf.Bytes())
	byName := map[string]cpioEntry{}
	for _, e := range entries {
		if _, dup := byName[e.Name]; dup {
			t.Errorf("%s twice", e.Name)
		}
		if e.UID != 0 || e.GID != 0 {
			t.Errorf("%s owned by %d:%d", e.Name, e.UID, e.GID)
		}
		byName[e.Name] = e
	}
	for _, d := range []string{"dev", "proc", "sys", "mnt", "newroot", "modules"} {
		if e, ok := byName[d]; !ok || e.Mode != 0o040755 {
			t.Errorf("directory %s: %+v", d, e)
		}
	}
	if c := byName["dev/console"]; c.Mode != 0o020600 || c.RMaj != 5 || c.RMin != 1 {
		t.Errorf("dev/console: mode %o, device %d:%d; want a 5:1 character device", c.Mode, c.RMaj, c.RMin)
	}
	if e := byName["init"]; e.Mode != 0o100755 || e.Data != "#!agent binary\x00\x01\x02" {
		t.Errorf("init: mode %o, data %q", e.Mode, e.Data)
	}
	var order []string
	for _, m := range mods {
		order = append(order, filepath.Base(m.Path))
		e, ok := byName["modules/"+filepath.Base(m.Path)]
		raw, _ := os.ReadFile(m.Path)
		if !ok || e.Mode != 0o100644 || e.Data != string(raw) {
			t.Errorf("module %s missing or changed", m.Name)
		}
	}
	if got := byName["modules/order"].Data; got != strings.Join(order, "\n")+"\n" {
		t.Errorf("modules/order = %q, want %q", got, order)
	}
	// The directories come before what is in them.
	pos := map[string]int{}
	for i, e := range entries {
		pos[e.Name] = i
	}
	for name := range byName {
		if dir := filepath.Dir(name); dir != "." && pos[dir] > pos[name] {
			t.Errorf("%s comes before its directory", name)
		}
	}

	// Without modules, no modules directory.
	buf.Reset()
	if err := writeInitramfs(&buf, agent, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range readCPIO(t, buf.Bytes()) {
		if strings.HasPrefix(e.Name, "modules") {
			t.Errorf("%s in an initramfs without modules", e.Name)
		}
	}
}

func TestInitramfsKey(t *testing.T) {
	mods := []kernelModule{{Name: "virtio", Path: "/k/virtio.ko", Sum: "aa"}}
	k := initramfsKey("agent1", mods)
	if initramfsKey("agent1", mods) != k {
		t.Error("the key is not stable")
	}
	for name, other := range map[string]string{
		"another agent":  initramfsKey("agent2", mods),
		"another module": initramfsKey("agent1", []kernelModule{{Name: "virtio", Path: "/k/virtio.ko", Sum: "bb"}}),
		"no modules":     initramfsKey("agent1", nil),
	} {
		if other == k {
			t.Errorf("%s: the same key", name)
		}
	}
	if fmt.Sprint(len(k)) != "32" {
		t.Errorf("key %q", k)
	}
}
