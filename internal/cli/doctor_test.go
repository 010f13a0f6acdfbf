package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/local"
)

// TestDoctorOnThisHost runs the real self-checks: where runsc runs and the
// tests run as root (CI), gVisor works and doctor exits 0.
func TestDoctorOnThisHost(t *testing.T) {
	testutil.RequiresRunsc(t)
	var stdout, stderr bytes.Buffer
	g := &globals{root: t.TempDir(), stdout: &stdout, stderr: &stderr}
	if err := runDoctor(context.Background(), g, &doctorOptions{json: true, checks: backend.CheckAll}); err != nil {
		t.Fatalf("doctor: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var rep doctorReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, stdout.String())
	}
	// By name: other tests of this binary register backends of their own.
	i := slices.IndexFunc(rep.Backends, func(r backend.Report) bool { return r.Backend == "gvisor" })
	if rep.Default != "gvisor" || i < 0 || !rep.Backends[i].Works {
		t.Fatalf("report: %+v", rep)
	}
	for _, f := range rep.Backends[i].Findings {
		if f.What == "runsc" && !strings.Contains(f.Detail, "runsc") {
			t.Errorf("the runsc finding does not say which runsc: %+v", f)
		}
	}
	// Every backend is listed, those of other systems with where they run.
	for _, name := range []string{"gvisor", "runc", "firecracker", "apple", "wsl"} {
		j := slices.IndexFunc(rep.Backends, func(r backend.Report) bool { return r.Backend == name })
		if j < 0 {
			t.Errorf("doctor does not list backend %s", name)
			continue
		}
		if where, ok := local.Elsewhere[name]; ok {
			r := rep.Backends[j]
			if r.Works || len(r.Findings) != 1 || !strings.Contains(r.Findings[0].Detail, where) {
				t.Errorf("backend %s of another system: %+v; want it not working here and saying it needs %s", name, r, where)
			}
		}
	}
}

func TestDoctorSaysWhatToFix(t *testing.T) {
	broken := func(context.Context) []backend.Report {
		return []backend.Report{{Backend: "gvisor", Checked: true, Findings: []backend.Finding{
			{What: "runsc", Detail: "not found", Fix: "run scripts/setup.sh"},
			{What: "root", OK: true, Detail: "uid 0"},
		}}}
	}
	var stdout, stderr bytes.Buffer
	g := &globals{root: t.TempDir(), stdout: &stdout, stderr: &stderr}
	err := runDoctor(context.Background(), g, &doctorOptions{checks: broken})
	var exit *exitError
	if !errors.As(err, &exit) || exit.code != 1 {
		t.Fatalf("doctor with a broken default backend: %v, want exit status 1", err)
	}
	out := stdout.String()
	for _, want := range []string{"backend gvisor: does not work here", "FAIL runsc", "fix: run scripts/setup.sh", "ok   root"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor's output lacks %q:\n%s", want, out)
		}
	}

	// A backend this tupper does not have.
	stdout.Reset()
	g.backend = "firecracker"
	err = runDoctor(context.Background(), g, &doctorOptions{checks: broken})
	if !errors.As(err, &exit) || !strings.Contains(stderr.String(), `"firecracker" is not built into this tupper`) {
		t.Fatalf("doctor --backend firecracker: %v, %s", err, stderr.String())
	}
}
