package filesystem

import (
	"io/fs"
	"net/http"
	"testing"
	"time"
)

func TestPermissions(t *testing.T) {
	tests := []struct {
		name string
		mode fs.FileMode
		want string
	}{
		{"file", 0o644, "-rw-r--r--"},
		{"executable", 0o755, "-rwxr-xr-x"},
		{"nothing", 0, "----------"},
		{"directory", fs.ModeDir | 0o755, "drwxr-xr-x"},
		{"symlink", fs.ModeSymlink | 0o777, "lrwxrwxrwx"},
		{"setuid", fs.ModeSetuid | 0o755, "-rwsr-xr-x"},
		{"setgid without group x", fs.ModeSetgid | 0o644, "-rw-r-Sr--"},
		{"sticky dir", fs.ModeDir | fs.ModeSticky | 0o777, "drwxrwxrwt"},
		{"sticky without x", fs.ModeDir | fs.ModeSticky | 0o776, "drwxrwxrwT"},
		{"pipe", fs.ModeNamedPipe | 0o600, "prw-------"},
		{"socket", fs.ModeSocket | 0o755, "srwxr-xr-x"},
		{"char device", fs.ModeDevice | fs.ModeCharDevice | 0o666, "crw-rw-rw-"},
		{"block device", fs.ModeDevice | 0o660, "brw-rw----"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := permissions(tt.mode); got != tt.want {
				t.Errorf("permissions(%v) = %q, want %q", tt.mode, got, tt.want)
			}
		})
	}
}

func TestKeepaliveInterval(t *testing.T) {
	tests := []struct {
		name, header string
		want         time.Duration
	}{
		{"absent", "", DefaultKeepaliveInterval},
		{"seconds", "50", 50 * time.Second},
		{"one", "1", time.Second},
		{"zero", "0", DefaultKeepaliveInterval},
		{"negative", "-3", DefaultKeepaliveInterval},
		{"garbage", "soon", DefaultKeepaliveInterval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.header != "" {
				h.Set("Keepalive-Ping-Interval", tt.header)
			}
			if got := keepaliveInterval(h); got != tt.want {
				t.Errorf("keepaliveInterval(%q) = %v, want %v", tt.header, got, tt.want)
			}
		})
	}
}
