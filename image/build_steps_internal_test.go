package image

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// mmdebstrapOutput is mmdebstrap --verbose's output for a build of two
// essential packages and three more, cut to the lines that matter and a
// few that do not.
func mmdebstrapOutput() []string {
	out := []string{
		"I: automatically chosen mode: root",
		"I: using /tmp/mmdebstrap.x as tempdir",
		"I: running apt-get update...",
		"Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]",
		"Get:2 http://deb.debian.org/debian bookworm/main amd64 Packages [8790 kB]",
		"I: downloading packages with apt...",
		"0 upgraded, 2 newly installed, 0 to remove and 0 not upgraded.",
		"Get:1 http://deb.debian.org/debian bookworm/main amd64 libc6 amd64 2.36 [2759 kB]",
		"Get:2 http://deb.debian.org/debian bookworm/main amd64 bash amd64 5.2 [1500 kB]",
		"I: extracting archives...",
		"I: installing essential packages...",
		"Unpacking libc6:amd64 (2.36) ...",
		"Unpacking bash (5.2) ...",
		"Setting up libc6:amd64 (2.36) ...",
		"Setting up bash (5.2) ...",
		"I: installing remaining packages inside the chroot...",
		"0 upgraded, 3 newly installed, 0 to remove and 0 not upgraded.",
	}
	for i, p := range []string{"apt", "procps", "curl"} {
		out = append(out, fmt.Sprintf("Get:%d http://deb.debian.org/debian bookworm/main amd64 %s amd64 1 [1 kB]", i+1, p))
	}
	for _, p := range []string{"apt", "procps", "curl"} {
		out = append(out, "Unpacking "+p+" (1) ...")
	}
	for _, p := range []string{"apt", "procps", "curl"} {
		out = append(out, "Setting up "+p+" (1) ...")
	}
	return append(out,
		"I: running --customize-hook in shell: sh -c 'set -e' exec /tmp/mmdebstrap.x",
		"I: running --customize-hook in shell: sh -c 'set -e' exec /tmp/mmdebstrap.x",
		"I: cleaning package lists and apt cache...",
		"I: creating tarball...",
		"I: done",
		"I: removing tempdir /tmp/mmdebstrap.x...",
		"I: success in 22.2 seconds",
	)
}

func TestDebianProgress(t *testing.T) {
	var events []Event
	rep := newReporter(ProgressFunc(func(e Event) { events = append(events, e) }))
	d := newDebianProgress(rep, "tiny")
	if got := d.where(); got != "" {
		t.Errorf("where before the first step = %q, want nothing", got)
	}
	for _, l := range mmdebstrapOutput() {
		d.line(l)
	}
	if got, want := d.where(), " at step 9 of 11 (remove the build tree)"; got != want {
		t.Errorf("where = %q, want %q", got, want)
	}
	d.enterNamed(stepStore)
	d.enterNamed(stepUnpack)

	var steps, counts []string
	last := 0.0
	for _, e := range events {
		if e.Fraction < last || e.Fraction > 1 {
			t.Errorf("event %+v: fraction %v after %v: it must grow, up to 1", e, e.Fraction, last)
		}
		last = e.Fraction
		if e.Item != "tiny" {
			t.Errorf("event %+v is about %q", e, e.Item)
		}
		switch e.Phase {
		case PhaseStep:
			steps = append(steps, fmt.Sprintf("%d/%d %s", e.Current, e.Total, e.Message))
		case PhasePackages:
			counts = append(counts, fmt.Sprintf("%s %d/%d", e.Message, e.Current, e.Total))
		}
	}
	wantSteps := []string{
		"1/11 update package lists", "2/11 download essential packages", "3/11 extract essential packages",
		"4/11 install essential packages", "5/11 install packages", "6/11 run hooks", "7/11 clean apt caches",
		"8/11 write the tarball", "9/11 remove the build tree", "10/11 store the layer", "11/11 unpack the image",
	}
	if d := cmp.Diff(wantSteps, steps); d != "" {
		t.Errorf("steps (-want +got):\n%s", d)
	}
	wantCounts := []string{
		"fetched 1/2", "fetched 2/2", // the index files of apt-get update are not packages
		"unpacked 1/2", "unpacked 2/2", "set up 1/2", "set up 2/2",
		"fetched 1/3", "fetched 2/3", "fetched 3/3", "unpacked 1/3", "unpacked 2/3", "unpacked 3/3", "set up 1/3", "set up 2/3", "set up 3/3",
	}
	if d := cmp.Diff(wantCounts, counts); d != "" {
		t.Errorf("package counts (-want +got):\n%s", d)
	}
	// All of the steps before the store's own: their shares, out of 100.
	if got := events[len(events)-1].Fraction; got < 0.94 || got > 0.96 {
		t.Errorf("fraction at the last step = %v, want 0.95", got)
	}
	if got := strings.Count(fmt.Sprint(steps), "hooks"); got != 1 {
		t.Errorf("two hooks made %d steps, want one", got)
	}
}

// TestDebianProgressFailure checks that a failed build is placed at the
// step that failed, not at the cleanup mmdebstrap does after it.
func TestDebianProgressFailure(t *testing.T) {
	d := newDebianProgress(newReporter(nil), "bad")
	for _, l := range []string{
		"I: running apt-get update...",
		"I: installing remaining packages inside the chroot...",
		"E: Unable to locate package no-such-package",
		"I: main() received signal PIPE: waiting for setup...",
		"I: removing tempdir /tmp/mmdebstrap.x...",
		"E: mmdebstrap failed to run",
	} {
		d.line(l)
	}
	if got, want := d.where(), " at step 5 of 11 (install packages)"; got != want {
		t.Errorf("where = %q, want %q", got, want)
	}
}
