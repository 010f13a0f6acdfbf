package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExt4Label(t *testing.T) {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("needs mkfs.ext4 (e2fsprogs)")
	}
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.ext4")
	if out, err := exec.Command(mkfs, "-q", "-F", "-L", vmRWLabel, disk, "8M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	if got := ext4Label(disk); got != vmRWLabel {
		t.Errorf("ext4Label = %q, want %q", got, vmRWLabel)
	}
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, make([]byte, 4096), 0o600)
	if got := ext4Label(plain); got != "" {
		t.Errorf("ext4Label of zeros = %q, want none", got)
	}
	if got := ext4Label(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("ext4Label of a missing file = %q", got)
	}
}

func TestReadBootConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"hostname":"sb1","env":["A=1","TUPPER_ACCESS_TOKEN=t"],"args":["--addr",":49983"],"pids":128}`), 0o600)
	c, err := readBootConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	want := &vmBootConfiguration{Hostname: "sb1", Env: []string{"A=1", "TUPPER_ACCESS_TOKEN=t"}, Args: []string{"--addr", ":49983"}, Pids: 128}
	if d := cmp.Diff(want, c); d != "" {
		t.Errorf("boot configuration (-want +got):\n%s", d)
	}
	for name, body := range map[string]string{"bad env": `{"env":["NOEQUALS"]}`, "not json": `{`} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		if _, err := readBootConfig(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := readBootConfig(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing boot configuration: no error")
	}
}

func TestLoadModulesWithoutOrder(t *testing.T) {
	if err := loadModules(filepath.Join(t.TempDir(), "order")); err != nil {
		t.Errorf("a kernel without modules to load: %v", err)
	}
}
