package sdk_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/sdk"
)

// specOf is t as the build API gets it, decoded.
func specOf(t *testing.T, tpl *sdk.Template) sdk.TemplateSpec {
	t.Helper()
	data, err := json.Marshal(tpl)
	if err != nil {
		t.Fatal(err)
	}
	var s sdk.TemplateSpec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTemplateSteps checks that each method adds the step E2B's SDK adds
// for it, with the same commands (e2b 2.51.0's aptInstall, pipInstall,
// npmInstall, copy, setEnvs, skipCache and ready checks).
func TestTemplateSteps(t *testing.T) {
	tests := []struct {
		name string
		tpl  *sdk.Template
		want sdk.TemplateSpec
	}{{
		name: "no base is E2B's base image",
		tpl:  sdk.NewTemplate().RunCmd("true", ""),
		want: sdk.TemplateSpec{FromImage: "e2bdev/base", Steps: []sdk.TemplateStep{{Type: "RUN", Args: []string{"true"}}}},
	}, {
		name: "every step",
		tpl: sdk.NewTemplate().FromImage("debian:bookworm").
			RunCmd("echo hi", "root").
			Copy("app", "/srv/app", "", 0).
			Copy("bin/tool", "/usr/local/bin/", "root", 0o755).
			SetEnvs(map[string]string{"B": "2", "A": "1"}).
			SetWorkdir("/srv/app").
			SetUser("user").
			SetStartCmd("python3 -m http.server 8000", sdk.WaitForPort(8000)),
		want: sdk.TemplateSpec{
			FromImage: "debian:bookworm", StartCmd: "python3 -m http.server 8000", ReadyCmd: `[ -n "$(ss -Htuln sport = :8000)" ]`,
			Steps: []sdk.TemplateStep{
				{Type: "RUN", Args: []string{"echo hi", "root"}},
				{Type: "COPY", Args: []string{"app", "/srv/app", "", ""}},
				{Type: "COPY", Args: []string{"bin/tool", "/usr/local/bin/", "root", "0755"}},
				{Type: "ENV", Args: []string{"A", "1", "B", "2"}},
				{Type: "WORKDIR", Args: []string{"/srv/app"}},
				{Type: "USER", Args: []string{"user"}},
			},
		},
	}, {
		name: "installs",
		tpl: sdk.NewTemplate().FromTemplate("base").
			AptInstall("curl", "git").PipInstall("requests").PipInstall().
			NpmInstall("left-pad").NpmInstall().NpmInstallGlobal("typescript"),
		want: sdk.TemplateSpec{FromTemplate: "base", Steps: []sdk.TemplateStep{
			{Type: "RUN", Args: []string{"apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y curl git", "root"}},
			{Type: "RUN", Args: []string{"pip install requests", "root"}},
			{Type: "RUN", Args: []string{"pip install .", "root"}},
			{Type: "RUN", Args: []string{"npm install left-pad"}},
			{Type: "RUN", Args: []string{"npm install"}},
			{Type: "RUN", Args: []string{"npm install -g typescript", "root"}},
		}},
	}, {
		name: "skip cache forces the steps after it",
		tpl:  sdk.NewTemplate().FromImage("x").RunCmd("a", "").SkipCache().RunCmd("b", ""),
		want: sdk.TemplateSpec{FromImage: "x", Steps: []sdk.TemplateStep{
			{Type: "RUN", Args: []string{"a"}}, {Type: "RUN", Args: []string{"b"}, Force: true},
		}},
	}, {
		name: "skip cache before the base forces all",
		tpl:  sdk.NewTemplate().SkipCache().FromImage("x").RunCmd("a", ""),
		want: sdk.TemplateSpec{FromImage: "x", Force: true, Steps: []sdk.TemplateStep{{Type: "RUN", Args: []string{"a"}, Force: true}}},
	}, {
		name: "empty envs add nothing",
		tpl:  sdk.NewTemplate().FromImage("x").SetEnvs(nil),
		want: sdk.TemplateSpec{FromImage: "x", Steps: []sdk.TemplateStep{}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, specOf(t, tt.tpl)); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadyCmds checks the ready checks against E2B's, character for
// character.
func TestReadyCmds(t *testing.T) {
	tests := []struct {
		name string
		got  sdk.ReadyCmd
		want string
	}{
		{"port", sdk.WaitForPort(3000), `[ -n "$(ss -Htuln sport = :3000)" ]`},
		{"url", sdk.WaitForURL("http://localhost:3000/health", 0), `curl -s -o /dev/null -w "%{http_code}" http://localhost:3000/health | grep -q "200"`},
		{"url with a status and a query", sdk.WaitForURL("http://localhost/?a=1&b=it's", 204), `curl -s -o /dev/null -w "%{http_code}" 'http://localhost/?a=1&b=it'"'"'s' | grep -q "204"`},
		{"process", sdk.WaitForProcess("my-daemon"), `pgrep my-daemon > /dev/null`},
		{"file", sdk.WaitForFile("/tmp/ready now"), `[ -f '/tmp/ready now' ]`},
		{"timeout", sdk.WaitForTimeout(5500 * time.Millisecond), `sleep 5`},
		{"short timeout", sdk.WaitForTimeout(10 * time.Millisecond), `sleep 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Errorf("got  %s\nwant %s", tt.got, tt.want)
			}
		})
	}
}

// TestTemplateCopyOutsideContext checks that COPY sources must stay in
// the context directory, and that the mistake surfaces at the build.
func TestTemplateCopyOutsideContext(t *testing.T) {
	for _, src := range []string{"/etc/passwd", "../secret", "a/../../b"} {
		tpl := sdk.NewTemplate().Copy(src, "/x", "", 0)
		if tpl.Err() == nil {
			t.Errorf("Copy(%q) was taken", src)
		}
		_, err := (&sdk.Client{}).BuildTemplate(context.Background(), tpl, "x")
		if !sdk.IsInvalidArgument(err) || !strings.Contains(err.Error(), src) {
			t.Errorf("BuildTemplate with Copy(%q): %v, want an invalid argument naming it", src, err)
		}
	}
}
