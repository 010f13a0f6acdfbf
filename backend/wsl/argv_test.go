package wsl

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
)

// TestArgv holds every wsl.exe call the backend makes to the letter.
func TestArgv(t *testing.T) {
	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{"import", importArgs("tupper-abc", `C:\ProgramData\tupper\wsl\sandboxes\abc\distro`),
			[]string{"--import", "tupper-abc", `C:\ProgramData\tupper\wsl\sandboxes\abc\distro`, "-", "--version", "2"}},
		{"resize, whole MiB", resizeArgs("tupper-abc", 300<<20), []string{"--manage", "tupper-abc", "--resize", "300MB"}},
		{"resize, rounded up", resizeArgs("tupper-abc", 300<<20+1), []string{"--manage", "tupper-abc", "--resize", "301MB"}},
		{"exec", execArgs("tupper-abc", []string{"/bin/sh", "-c", "x"}),
			[]string{"-d", "tupper-abc", "-u", "root", "--cd", "/", "--exec", "/bin/sh", "-c", "x"}},
		{"terminate", terminateArgs("tupper-abc"), []string{"--terminate", "tupper-abc"}},
		{"unregister", unregisterArgs("tupper-abc"), []string{"--unregister", "tupper-abc"}},
		{"list all", listAllArgs, []string{"--list", "--all", "--quiet"}},
		{"list running", listRunningArgs, []string{"--list", "--running", "--quiet"}},
		{"list verbose", listVerboseArgs, []string{"--list", "--verbose"}},
		{"version", versionArgs, []string{"--version"}},
		{"status", statusArgs, []string{"--status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.got); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAgentArgv checks the command the agent's wsl.exe runs in the
// distribution: the launcher with the task cap, a clean environment
// without the token, the agent on its host ports at 127.0.0.1, reading the
// token from stdin.
func TestAgentArgv(t *testing.T) {
	ports := map[int]int{backend.AgentPort: 41007, 49999: 41008}
	tests := []struct {
		name      string
		spec      backend.Spec
		pids      int64
		want      []string
		wantToken string
	}{
		{
			name: "as the engine starts one, with a code interpreter",
			spec: backend.Spec{
				Env:   []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TUPPER_ACCESS_TOKEN=s3cret", "QUOTE=a \"b\" c"},
				Agent: backend.Agent{Args: []string{"--addr", ":49983", "--code-interpreter", ":49999"}},
			},
			pids: 1024,
			want: []string{"/bin/sh", "/.tupper/wsl/start", "1024", "/usr/bin/env", "-i",
				"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "QUOTE=a \"b\" c",
				"/.tupper/wsl/tupper-agent", "--addr", "127.0.0.1:41007", "--code-interpreter", "127.0.0.1:41008",
				"--inside-conns", "0", "--access-token-fd", "0"},
			wantToken: "s3cret",
		},
		{
			name: "no token, --addr= form, other flags kept",
			spec: backend.Spec{
				Env:   []string{"PATH=/bin"},
				Agent: backend.Agent{Args: []string{"--addr=:49983", "--user", "user"}},
			},
			pids: 128,
			want: []string{"/bin/sh", "/.tupper/wsl/start", "128", "/usr/bin/env", "-i", "PATH=/bin",
				"/.tupper/wsl/tupper-agent", "--addr", "127.0.0.1:41007", "--user", "user", "--inside-conns", "0"},
		},
		{
			name: "no --addr at all",
			spec: backend.Spec{Agent: backend.Agent{Args: []string{"--no-ensure-user"}}},
			pids: 1,
			want: []string{"/bin/sh", "/.tupper/wsl/start", "1", "/usr/bin/env", "-i",
				"/.tupper/wsl/tupper-agent", "--addr", "127.0.0.1:41007", "--no-ensure-user", "--inside-conns", "0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			argv, token := agentArgv(&tt.spec, ports, tt.pids)
			if diff := cmp.Diff(tt.want, argv); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
			if token != tt.wantToken {
				t.Errorf("token = %q, want %q", token, tt.wantToken)
			}
		})
	}
	if p := codeInterpreterPort([]string{"--addr", ":49983", "--code-interpreter=:49999"}); p != 49999 {
		t.Errorf("codeInterpreterPort = %d, want 49999", p)
	}
	if p := codeInterpreterPort([]string{"--addr", ":49983"}); p != 0 {
		t.Errorf("codeInterpreterPort without one = %d, want 0", p)
	}
}

func TestConfigFrom(t *testing.T) {
	cfg, err := configFrom(backend.Config{Root: "/var/lib/tupper/wsl", Options: map[string]string{"wsl": "/opt/wsl.exe", "ports": "42000-42099"}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WSLPath != "/opt/wsl.exe" || cfg.FirstPort != 42000 || cfg.LastPort != 42099 {
		t.Errorf("config = %+v", cfg)
	}
	for _, c := range []backend.Config{
		{Root: "/r", Options: map[string]string{"runsc": "x"}},
		{Root: "/r", Options: map[string]string{"ports": "42000"}},
		{Root: "/r", Options: map[string]string{"ports": "50-60"}},
		{Root: "/r", Network: backend.NetworkConfig{NoEgress: true}},
		{Root: "relative"},
	} {
		if _, err := configFrom(c); err == nil {
			t.Errorf("configFrom(%+v) = nil error", c)
		}
	}
}
