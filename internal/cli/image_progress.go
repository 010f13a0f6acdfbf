package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/progress"
)

// imageProgress shows the events of an image operation (pull, import,
// build) as a progress task: a build's steps and package counts, the bytes
// downloaded, read or unpacked summed over the layers, each layer as it is
// finished. A builder's own lines go to raw. The store sends the events of
// one operation one at a time.
type imageProgress struct {
	task *progress.Task
	// raw receives the builder's lines; nil drops them.
	raw io.Writer
	// stepped is set once the operation reports steps (a build): its
	// byte counts are then part of a step.
	stepped bool
	// phase is the byte-moving phase counted now, items its amounts per
	// item: done and total.
	phase image.Phase
	items map[string]*[2]int64
}

// Event implements image.Progress.
func (ip *imageProgress) Event(e image.Event) {
	switch e.Phase {
	case image.PhaseBuild:
		if ip.raw != nil {
			fmt.Fprintln(ip.raw, e.Message)
		}
	case image.PhaseStep:
		ip.stepped = true
		ip.task.Step(int(e.Current), int(e.Total), e.Message)
		ip.task.Fraction(e.Fraction)
	case image.PhasePackages:
		ip.task.Fraction(e.Fraction)
		ip.task.Amount(e.Current, e.Total, "packages", e.Message)
	case image.PhaseResolve:
		if e.Message != "" {
			ip.task.Note(e.Message)
		}
	case image.PhaseDownload, image.PhaseRead, image.PhaseUnpack:
		ip.bytes(e)
	}
}

// byteDetail is what the amount of each byte-moving phase is shown as.
var byteDetail = map[image.Phase]string{
	image.PhaseDownload: "download",
	image.PhaseRead:     "read",
	image.PhaseUnpack:   "unpack",
}

func (ip *imageProgress) bytes(e image.Event) {
	if e.Phase != ip.phase {
		ip.phase, ip.items = e.Phase, map[string]*[2]int64{}
	}
	switch {
	case e.Message != "" && ip.stepped:
		// A build's own layer and tree are new: nothing to say.
		return
	case e.Message != "" && e.Phase == image.PhaseDownload:
		ip.task.PartDone(shortID(e.Item), 0, e.Message) // "already present"
		return
	case e.Message != "":
		ip.task.Note(e.Message) // "already unpacked"
		return
	}
	it := ip.items[e.Item]
	if it == nil {
		it = new([2]int64)
		ip.items[e.Item] = it
	}
	it[0], it[1] = e.Current, max(e.Total, it[1])
	if e.Current == 0 && !e.Done {
		// An announcement: the next event counts it in, by when the
		// others have been announced too.
		return
	}
	var done, total int64
	for _, v := range ip.items {
		done += v[0]
		total += v[1]
	}
	ip.task.Amount(done, total, "bytes", byteDetail[e.Phase])
	if e.Done && e.Phase != image.PhaseRead {
		ip.task.PartDone(shortID(e.Item), e.Current, "")
	}
}

// imageRun is how an image command shows its work.
type imageRun struct {
	// what and item name the task: "pull", "localhost:5000/tools:1".
	what, item string
	// json writes the progress as JSON lines on standard output, whose
	// last line, the task's end, says the images' ids; else it goes to
	// standard error.
	json bool
	// log, when set, receives the builder's lines; with show they are
	// printed too.
	log  io.Writer
	show bool
}

// run runs op, showing its progress, and ends the task with the ids of
// the images it made.
func (r imageRun) run(g *globals, op func(image.Progress) ([]*image.Image, error)) ([]*image.Image, error) {
	w := g.stderr
	if r.json {
		w = g.stdout
	}
	pr := progress.New(w, progress.FormatFor(w, r.json))
	defer pr.Close()
	var raw []io.Writer
	if r.log != nil {
		raw = append(raw, r.log)
	}
	if r.show {
		raw = append(raw, pr.Writer())
	}
	task := pr.Start(r.what, r.item)
	imgs, err := op(&imageProgress{task: task, raw: io.MultiWriter(raw...)})
	if err != nil {
		task.Fail(err)
	} else {
		ids := make([]string, 0, len(imgs))
		for _, img := range imgs {
			ids = append(ids, img.ID)
		}
		task.Done(strings.Join(ids, ","))
	}
	if !r.json {
		// What was stored, even by an import that failed later on.
		for _, img := range imgs {
			fmt.Fprintf(g.stdout, "%s %s\n", strings.Join(img.Names, ","), shortID(img.ID))
		}
	}
	return imgs, err
}
