package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lightbearco/tupper/sdk"
)

// Figure keys of report.json.
const (
	KeyCreateCold = "create-cold"
	KeyCreateWarm = "create-warm"
	KeyCommand    = "command-go"
	KeyCommandJS  = "command-js"
	KeyMemory     = "memory-idle"
	KeyListLoad   = "list-under-load"
	KeyRawRun     = "runsc-run"
	KeyRawExec    = "runsc-exec"
)

// KeyTransfer is the key of a transfer figure: op "upload" or "download"
// of size bytes through client "go" or "js".
func KeyTransfer(op string, size int64, client string) string {
	return fmt.Sprintf("%s-%s-%s", op, sizeKey(size), client)
}

// KeyConcurrent is the key of the figure of n concurrent creates.
func KeyConcurrent(n int) string { return fmt.Sprintf("concurrent-%d", n) }

func sizeKey(size int64) string {
	if size%(1<<20) == 0 {
		return fmt.Sprintf("%dmib", size>>20)
	}
	return fmt.Sprintf("%dkib", size>>10)
}

func sizeName(size int64) string {
	if size%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", size>>20)
	}
	return fmt.Sprintf("%d KiB", size>>10)
}

// Config is what one bench measures and how.
type Config struct {
	// Client reaches the daemon.
	Client *sdk.Client
	// Warm tells which creates came from a warm pool; nil counts every
	// create as cold.
	Warm *WarmTracker
	// Template is what the sandboxes start from; empty means the
	// daemon's default.
	Template string
	// Runs is the number of samples of each figure.
	Runs int
	// Concurrency are the numbers of creates started at once, one round
	// each; the sandboxes of the largest are the ones whose memory is
	// read.
	Concurrency []int
	// Sizes are the transfer sizes in bytes.
	Sizes []int64
	// Local reports whether the daemon's sandboxes run on this host, so
	// that their memory can be read.
	Local bool
	// Settle is how long the sandboxes idle before their memory is read;
	// 0 means 3 seconds.
	Settle time.Duration
	// Raw measures runsc alone; nil skips it, RawSkip saying why.
	Raw     *RawRunsc
	RawSkip string
	// JS is the JS SDK path; nil skips it, JSSkip saying why.
	JS     *JSSDK
	JSSkip string
	// Progress shows how far the bench is; nil shows nothing.
	Progress *Progress
}

// Validate checks c and fills its defaults.
func (c *Config) Validate() error {
	if c.Client == nil {
		return errors.New("bench: no client")
	}
	if c.Runs < 1 {
		return fmt.Errorf("bench: runs %d: want at least 1", c.Runs)
	}
	for _, n := range c.Concurrency {
		if n < 1 {
			return fmt.Errorf("bench: concurrency %d: want at least 1", n)
		}
	}
	if c.Settle == 0 {
		c.Settle = 3 * time.Second
	}
	if c.Progress == nil {
		c.Progress = &Progress{}
	}
	return nil
}

// bench is one run of the measurements.
type bench struct {
	cfg Config
	rep *Report
}

// Run measures every figure against the daemon and returns the report, its
// Machine left for the caller to describe. A figure that cannot be measured
// carries why; Run fails only when the daemon cannot give a sandbox for the
// figures that need one to go on.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, rep: &Report{Started: time.Now(), Runs: cfg.Runs, Template: cfg.Template}}
	if b.rep.Template == "" {
		b.rep.Template = "the daemon's default"
	}
	b.declare()
	b.raw(ctx)
	if err := b.creates(ctx); err != nil {
		return nil, err
	}
	if err := b.oneSandbox(ctx); err != nil {
		return nil, err
	}
	b.concurrent(ctx)
	b.rep.Duration = time.Since(b.rep.Started)
	b.rep.Summarize()
	return b.rep, nil
}

// declare lists every figure, in report order, before any is measured, so
// that one left unmeasured still shows, with why.
func (b *bench) declare() {
	n := b.cfg.Runs
	add := func(key, name string, s Section, unit string, runs int) *Figure {
		f := &Figure{Key: key, Name: name, Section: s, Unit: unit, Runs: runs, Samples: []float64{}}
		b.rep.Figures = append(b.rep.Figures, f)
		return f
	}
	add(KeyCreateCold, "create to first command (cold)", SectionCreate, UnitMS, n)
	add(KeyCreateWarm, "create to first command (warm)", SectionCreate, UnitMS, n)
	add(KeyCommand, "commands.run(true) (Go SDK)", SectionCommand, UnitMS, n)
	add(KeyCommandJS, "commands.run(true) (JS SDK)", SectionCommand, UnitMS, n)
	for _, client := range []string{"go", "js"} {
		for _, size := range b.cfg.Sizes {
			for _, op := range []string{"upload", "download"} {
				f := add(KeyTransfer(op, size, client), fmt.Sprintf("%s %s (%s SDK)", op, sizeName(size), map[string]string{"go": "Go", "js": "JS"}[client]), SectionTransfer, UnitMS, n)
				f.Bytes = size
			}
		}
	}
	for _, c := range b.cfg.Concurrency {
		add(KeyConcurrent(c), fmt.Sprintf("%d concurrent creates", c), SectionConcurrent, UnitMS, c)
	}
	k := 0
	if len(b.cfg.Concurrency) > 0 {
		k = slices.Max(b.cfg.Concurrency)
	}
	add(KeyListLoad, fmt.Sprintf("list sandboxes during the %d creates", k), SectionConcurrent, UnitMS, 0)
	add(KeyMemory, fmt.Sprintf("idle sandbox, %d running", k), SectionMemory, UnitMiB, k)
	add(KeyRawRun, "runsc run /bin/true", SectionRaw, UnitMS, n)
	add(KeyRawExec, "runsc exec /bin/true", SectionRaw, UnitMS, n)
	if b.cfg.JS == nil {
		for _, f := range b.rep.Figures {
			if isJS(f) {
				f.Skip(b.cfg.JSSkip)
			}
		}
	}
	if k == 0 {
		b.rep.Figure(KeyMemory).Skip("no sandboxes run at once")
		b.rep.Figure(KeyListLoad).Skip("no sandboxes run at once")
	}
}

// raw measures runsc alone.
func (b *bench) raw(ctx context.Context) {
	run, exec := b.rep.Figure(KeyRawRun), b.rep.Figure(KeyRawExec)
	if b.cfg.Raw == nil {
		run.Skip(b.cfg.RawSkip)
		exec.Skip(b.cfg.RawSkip)
		return
	}
	if err := b.cfg.Raw.Measure(ctx, b.cfg.Runs, run, exec, b.cfg.Progress); err != nil {
		run.Fail(err)
		exec.Fail(err)
	}
}

// create makes a sandbox for the bench; it lives ten minutes at most,
// should the bench die before it kills it.
func (b *bench) create(ctx context.Context) (*sdk.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return b.cfg.Client.Create(ctx, sdk.CreateOptions{Template: b.cfg.Template, Timeout: 10 * time.Minute})
}

// kill kills sb, whatever became of the bench's context.
func kill(ctx context.Context, sb *sdk.Sandbox) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	sb.Kill(ctx)
}

// creates measures create → first command, sorting each run into cold or
// warm by what the create said.
func (b *bench) creates(ctx context.Context) error {
	cold, warm := b.rep.Figure(KeyCreateCold), b.rep.Figure(KeyCreateWarm)
	p := b.cfg.Progress
	p.Start("create to first command", b.cfg.Runs)
	for range b.cfg.Runs {
		start := time.Now()
		sb, err := b.create(ctx)
		if err != nil {
			if ctx.Err() != nil || len(cold.Samples)+len(warm.Samples) == 0 {
				// Nothing works: the other figures would fail alike.
				p.End("failed")
				return fmt.Errorf("create: %w", err)
			}
			cold.Fail(err)
			p.Step()
			continue
		}
		f := cold
		if b.cfg.Warm != nil && b.cfg.Warm.Warm(sb.ID()) {
			f = warm
		}
		if _, err := b.command(ctx, sb); err != nil {
			f.Fail(err)
		} else {
			f.AddDuration(time.Since(start))
		}
		kill(ctx, sb)
		p.Step()
	}
	p.End(fmt.Sprintf("%d cold, %d warm", len(cold.Samples), len(warm.Samples)))
	if len(warm.Samples) == 0 && warm.Errors == 0 {
		warm.Skip("no create came from a warm pool (the daemon has none for this template: tupper serve --warm TEMPLATE=N)")
	}
	if len(cold.Samples) == 0 && cold.Errors == 0 {
		cold.Skip("every create came from the warm pool")
	}
	return nil
}

// command runs `true` in sb and returns how long it took.
func (b *bench) command(ctx context.Context, sb *sdk.Sandbox) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	start := time.Now()
	_, err := sb.Commands.Run(ctx, "true")
	return time.Since(start), err
}

// oneSandbox measures what is done in one running sandbox: command round
// trips and transfers, through the Go SDK and then the JS SDK.
func (b *bench) oneSandbox(ctx context.Context) error {
	sb, err := b.create(ctx)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer kill(ctx, sb)
	p := b.cfg.Progress

	// The first command starts what the later ones reuse; it is not one
	// of the samples.
	b.command(ctx, sb)
	cmd := b.rep.Figure(KeyCommand)
	p.Start(cmd.Name, b.cfg.Runs)
	for range b.cfg.Runs {
		if d, err := b.command(ctx, sb); err != nil {
			cmd.Fail(err)
		} else {
			cmd.AddDuration(d)
		}
		p.Step()
	}
	p.End(outcome(cmd))

	const path = "/tmp/tupper-bench.bin"
	for _, size := range b.cfg.Sizes {
		data := make([]byte, size)
		rand.Read(data) // random: nothing on the way can make it smaller
		up, down := b.rep.Figure(KeyTransfer("upload", size, "go")), b.rep.Figure(KeyTransfer("download", size, "go"))
		p.Start(fmt.Sprintf("upload and download %s (Go SDK)", sizeName(size)), b.cfg.Runs)
		for range b.cfg.Runs {
			b.transfer(ctx, sb, path, data, up, down)
			p.Step()
		}
		p.End(fmt.Sprintf("%s; %s", outcome(up), outcome(down)))
	}
	sb.Files.Remove(ctx, path)

	if b.cfg.JS != nil {
		b.js(ctx, sb.ID())
	}
	return nil
}

// transfer writes data to path in sb and reads it back, once each.
func (b *bench) transfer(ctx context.Context, sb *sdk.Sandbox, path string, data []byte, up, down *Figure) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := sb.Files.Write(ctx, path, data); err != nil {
		up.Fail(err)
		return
	}
	up.AddDuration(time.Since(start))
	start = time.Now()
	got, err := sb.Files.Read(ctx, path)
	switch {
	case err != nil:
		down.Fail(err)
	case len(got) != len(data):
		down.Fail(fmt.Errorf("read %d bytes of the %d written", len(got), len(data)))
	default:
		down.AddDuration(time.Since(start))
	}
}

// js measures the JS SDK's command round trip and transfers on sandbox id.
func (b *bench) js(ctx context.Context, id string) {
	p := b.cfg.Progress
	p.Start("JS SDK: commands and transfers", 1)
	samples, err := b.cfg.JS.run(ctx, id, b.cfg.Runs, b.cfg.Sizes)
	for _, s := range samples {
		var f *Figure
		switch s.Op {
		case "command":
			f = b.rep.Figure(KeyCommandJS)
		case "write":
			f = b.rep.Figure(KeyTransfer("upload", s.Bytes, "js"))
		case "read":
			f = b.rep.Figure(KeyTransfer("download", s.Bytes, "js"))
		}
		if f != nil {
			f.Add(s.MS)
		}
	}
	p.Step()
	if err != nil {
		// The runs that did not report failed with it.
		for _, f := range b.rep.Figures {
			if isJS(f) {
				for range f.Runs - len(f.Samples) {
					f.Fail(err)
				}
			}
		}
		p.End("failed: " + err.Error())
		return
	}
	p.End(fmt.Sprintf("%d runs", len(samples)))
}

// concurrent starts each round of creates at once, then reads the memory
// of the largest round's sandboxes before killing them. During the largest
// round it also lists the sandboxes every listEvery: how the daemon answers
// its other callers while it is busy creating.
func (b *bench) concurrent(ctx context.Context) {
	largest := 0
	if len(b.cfg.Concurrency) > 0 {
		largest = slices.Max(b.cfg.Concurrency)
	}
	measured := false
	for _, n := range b.cfg.Concurrency {
		f := b.rep.Figure(KeyConcurrent(n))
		var list *Figure
		if n == largest && !measured {
			list = b.rep.Figure(KeyListLoad)
		}
		sandboxes := b.burst(ctx, n, f, list)
		if n == largest && !measured {
			b.memory(ctx, sandboxes)
			measured = true
		}
		b.killAll(ctx, sandboxes)
	}
}

// listEvery is how often the sandboxes are listed during a round.
const listEvery = 100 * time.Millisecond

// burst starts n creates at once and records each one's latency in f, and
// how many came warm in its name. While they run, a non-nil list records
// the latency of listing the sandboxes.
func (b *bench) burst(ctx context.Context, n int, f, list *Figure) []*sdk.Sandbox {
	type result struct {
		sb  *sdk.Sandbox
		d   time.Duration
		err error
	}
	p := b.cfg.Progress
	p.Start(f.Name, n)
	results := make(chan result)
	gate := make(chan struct{})
	for range n {
		go func() {
			<-gate
			start := time.Now()
			sb, err := b.create(ctx)
			results <- result{sb, time.Since(start), err}
		}()
	}
	stop := make(chan struct{})
	listed := make(chan struct{})
	if list != nil {
		go func() {
			defer close(listed)
			b.listUntil(ctx, stop, list)
		}()
	} else {
		close(listed)
	}
	close(gate)
	var out []*sdk.Sandbox
	warm := 0
	for range n {
		r := <-results
		if r.err != nil {
			f.Fail(r.err)
		} else {
			f.AddDuration(r.d)
			out = append(out, r.sb)
			if b.cfg.Warm != nil && b.cfg.Warm.Warm(r.sb.ID()) {
				warm++
			}
		}
		p.Step()
	}
	close(stop)
	<-listed
	if b.cfg.Warm != nil {
		f.Name = fmt.Sprintf("%d concurrent creates (%d warm)", n, warm)
	}
	p.End(outcome(f))
	return out
}

// listUntil lists the sandboxes every listEvery until stop closes,
// recording each call's latency in f.
func (b *bench) listUntil(ctx context.Context, stop <-chan struct{}, f *Figure) {
	tick := time.NewTicker(listEvery)
	defer tick.Stop()
	for {
		start := time.Now()
		if _, _, err := b.cfg.Client.List(ctx, sdk.ListOptions{}); err != nil {
			f.Fail(err)
		} else {
			f.AddDuration(time.Since(start))
		}
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// memory reads the host memory of each of sandboxes once they have idled.
func (b *bench) memory(ctx context.Context, sandboxes []*sdk.Sandbox) {
	f := b.rep.Figure(KeyMemory)
	if !b.cfg.Local {
		f.Skip("not measured: the daemon is remote")
		return
	}
	if len(sandboxes) == 0 {
		f.Skip("not measured: no sandbox was created")
		return
	}
	p := b.cfg.Progress
	p.Start(fmt.Sprintf("host memory of %d idle sandboxes", len(sandboxes)), 1)
	select {
	case <-ctx.Done():
	case <-time.After(b.cfg.Settle):
	}
	ids := make([]string, len(sandboxes))
	for i, sb := range sandboxes {
		ids[i] = sb.ID()
	}
	mem := SandboxMemory(ids)
	for _, id := range ids {
		if v, ok := mem[id]; ok {
			f.Add(v)
		}
	}
	// Some of the round's creates may have failed: say how many ran.
	f.Runs = len(ids)
	f.Name = fmt.Sprintf("idle sandbox, %d running", len(ids))
	if len(f.Samples) == 0 {
		f.Skip("not measured: no process of the sandboxes was found on this host (a backend other than gVisor?)")
	}
	p.Step()
	p.End(outcome(f))
}

// killAll kills sandboxes, a few at a time.
func (b *bench) killAll(ctx context.Context, sandboxes []*sdk.Sandbox) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, sb := range sandboxes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			kill(ctx, sb)
		}()
	}
	wg.Wait()
}

// isJS reports whether f is measured through the JS SDK.
func isJS(f *Figure) bool { return strings.HasSuffix(f.Key, "-js") }

// outcome says in a few words what a figure's runs gave.
func outcome(f *Figure) string {
	s := Summarize(f.Samples)
	if s.N == 0 {
		if f.Note != "" {
			return f.Note
		}
		return "no samples"
	}
	out := fmt.Sprintf("median %s, p95 %s", formatValue(s.Median, f.Unit), formatValue(s.P95, f.Unit))
	if f.Errors > 0 {
		out += fmt.Sprintf(" (%d failed)", f.Errors)
	}
	return out
}
