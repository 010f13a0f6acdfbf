package image

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// debianStep is a step of BuildDebian: one of mmdebstrap's phases, which
// starts with a line of its output, or one of the store's own after it.
type debianStep struct {
	name string
	// prefix starts the step in mmdebstrap's output; empty for the
	// store's steps.
	prefix string
	// share is the step's part of a build's time, in percent, as a build
	// of the base template spends it with a fast mirror; actions divide
	// the step's share among what it does to its packages.
	share   float64
	actions []packageAction
}

// packageAction is what a step does to each of its packages, told by the
// lines of apt's and dpkg's output that start with prefix.
type packageAction struct {
	done   string // "fetched", "unpacked", "set up"
	prefix string
	share  float64 // of the step's, 0 to 1
}

// The lines of apt's and dpkg's output that count packages.
const (
	fetchLine     = "Get:"
	unpackingLine = "Unpacking "
	settingUpLine = "Setting up "
)

// debianSteps are BuildDebian's steps, in order. The step that installs
// the essential packages counts those the one before it fetched.
var debianSteps = []debianStep{
	{name: "update package lists", prefix: "I: running apt-get update", share: 3},
	{name: "download essential packages", prefix: "I: downloading packages with apt", share: 2, actions: []packageAction{{"fetched", fetchLine, 1}}},
	{name: "extract essential packages", prefix: "I: extracting archives", share: 5},
	{name: "install essential packages", prefix: "I: installing essential packages", share: 12,
		actions: []packageAction{{"unpacked", unpackingLine, 0.4}, {"set up", settingUpLine, 0.6}}},
	{name: "install packages", prefix: "I: installing remaining packages", share: 55,
		actions: []packageAction{{"fetched", fetchLine, 0.1}, {"unpacked", unpackingLine, 0.6}, {"set up", settingUpLine, 0.3}}},
	{name: "run hooks", prefix: "I: running --customize-hook", share: 1},
	{name: "clean apt caches", prefix: "I: cleaning package lists", share: 1},
	{name: "write the tarball", prefix: "I: creating tarball", share: 4},
	{name: "remove the build tree", prefix: "I: removing tempdir", share: 10},
	{name: stepStore, share: 2},
	{name: stepUnpack, share: 5},
}

// The store's own steps of BuildDebian.
const (
	stepStore  = "store the layer"
	stepUnpack = "unpack the image"
)

// newlyInstalled is apt's line that says how many packages it will
// install.
var newlyInstalled = regexp.MustCompile(`^\d+ upgraded, (\d+) newly installed`)

// debianProgress turns mmdebstrap's output (with --verbose: apt's and
// dpkg's lines too) into BuildDebian's steps and counts of packages, with
// an estimate of how much of the build is done. It is used from one
// goroutine.
type debianProgress struct {
	rep  *reporter
	item string
	// step is the index in debianSteps of the current step; -1 before
	// the first.
	step int
	// packages is how many packages the current step installs, and
	// essential how many the essential ones are; 0 when not known.
	packages, essential int
	// counts are the current step's packages per action.
	counts map[string]int
	// failed is set by mmdebstrap's first error: the steps of its
	// cleanup that follow are not the build's.
	failed bool
}

func newDebianProgress(rep *reporter, item string) *debianProgress {
	return &debianProgress{rep: rep, item: item, step: -1, counts: map[string]int{}}
}

// line takes one line of mmdebstrap's output.
func (d *debianProgress) line(l string) {
	if strings.HasPrefix(l, "E: ") {
		d.failed = true
	}
	if d.failed {
		return
	}
	for i := d.step + 1; i < len(debianSteps); i++ {
		if p := debianSteps[i].prefix; p != "" && strings.HasPrefix(l, p) {
			d.enter(i)
			return
		}
	}
	if d.step < 0 {
		return
	}
	if m := newlyInstalled.FindStringSubmatch(l); m != nil {
		d.packages, _ = strconv.Atoi(m[1])
		if debianSteps[d.step].name == "download essential packages" {
			d.essential = d.packages
		}
		return
	}
	for _, a := range debianSteps[d.step].actions {
		if !strings.HasPrefix(l, a.prefix) || d.packages == 0 {
			continue
		}
		if a.prefix == fetchLine {
			// "Get:12 http://…": apt numbers what it fetches.
			n, err := strconv.Atoi(strings.Fields(l[len(a.prefix):] + " ")[0])
			if err != nil {
				return
			}
			d.counts[a.done] = n
		} else {
			d.counts[a.done]++
		}
		n := min(d.counts[a.done], d.packages)
		d.rep.event(Event{Phase: PhasePackages, Item: d.item, Current: int64(n), Total: int64(d.packages), Message: a.done, Fraction: d.fraction()})
		return
	}
}

// enterNamed moves on to the store's step of that name.
func (d *debianProgress) enterNamed(name string) {
	for i, s := range debianSteps {
		if s.name == name && i > d.step {
			d.enter(i)
			return
		}
	}
}

func (d *debianProgress) enter(i int) {
	d.step = i
	d.counts = map[string]int{}
	d.packages = 0
	if debianSteps[i].name == "install essential packages" {
		d.packages = d.essential
	}
	d.rep.event(Event{Phase: PhaseStep, Item: d.item, Current: int64(i + 1), Total: int64(len(debianSteps)), Message: debianSteps[i].name, Fraction: d.fraction()})
}

// fraction estimates how much of the build is done: the shares of the
// steps behind, and of the current one the shares of its actions by the
// packages they have handled.
func (d *debianProgress) fraction() float64 {
	var done, all float64
	for i, s := range debianSteps {
		all += s.share
		if i < d.step {
			done += s.share
		}
	}
	if d.step >= 0 && d.packages > 0 {
		s := debianSteps[d.step]
		for _, a := range s.actions {
			done += s.share * a.share * float64(min(d.counts[a.done], d.packages)) / float64(d.packages)
		}
	}
	return done / all
}

// where names the current step for an error: "at step 5 of 11 (install
// packages)", or nothing before the first.
func (d *debianProgress) where() string {
	if d.step < 0 {
		return ""
	}
	return fmt.Sprintf(" at step %d of %d (%s)", d.step+1, len(debianSteps), debianSteps[d.step].name)
}
