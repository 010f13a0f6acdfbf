// Command standin stands in for Apple's `container` CLI where it cannot run
// (Linux, CI), so that the apple backend's tests drive the whole backend
// through a CLI: it implements the subcommands and flags the backend uses,
// as apple/container's command reference documents them, and prints the
// JSON of container 1.x, or of an older version.
//
// Its state lives in the directory $TUPPER_CONTAINER_STANDIN_DIR. It has
// two modes:
//
//   - sandbox (the default; Linux, as root): `run` boots a real sandbox of
//     the image's root with Tupper's runc backend, used as a library, and
//     the container's address is the sandbox's; `image load` imports the
//     archive into a Tupper image store.
//   - scripted ($TUPPER_CONTAINER_STANDIN_ADDR=an IPv4 address): `run`
//     boots nothing and says the container runs at that address; `image
//     load` checks the archive as an OCI image layout (every digest, every
//     layer) and records its names. For contract tests, anywhere.
//
// Other settings, all optional:
//
//	TUPPER_CONTAINER_STANDIN_SHAPE    the JSON of `list` and `inspect`: 1.0
//	                                  (the default), 0.8 (0.8 to 0.12) or 0.7
//	TUPPER_CONTAINER_STANDIN_VERSION  what --version says (default 1.2.2)
//	TUPPER_CONTAINER_STANDIN_SYSTEM   what `system status` says (default
//	                                  running; "not running", unregistered)
//	TUPPER_CONTAINER_STANDIN_FAIL     commands that fail, comma-separated:
//	                                  image-load, run, run-created (the
//	                                  container is made, then fails to
//	                                  boot), inspect, list, kill, delete,
//	                                  stats; no-address (`inspect` and
//	                                  `list` show no address)
//	TUPPER_CONTAINER_STANDIN_LOG      a file each command line is appended
//	                                  to, as a JSON array
//
// Errors go to stderr as "Error: …" with exit status 1, as the real CLI's
// do; an unknown option exits 64.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Environment variables.
const (
	envDir     = "TUPPER_CONTAINER_STANDIN_DIR"
	envAddr    = "TUPPER_CONTAINER_STANDIN_ADDR"
	envShape   = "TUPPER_CONTAINER_STANDIN_SHAPE"
	envVersion = "TUPPER_CONTAINER_STANDIN_VERSION"
	envSystem  = "TUPPER_CONTAINER_STANDIN_SYSTEM"
	envFail    = "TUPPER_CONTAINER_STANDIN_FAIL"
	envLog     = "TUPPER_CONTAINER_STANDIN_LOG"
)

// usageError is a command line the real CLI would refuse (exit 64).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func main() {
	err := run(context.Background(), os.Args[1:])
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "Error:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		os.Exit(64)
	}
	os.Exit(1)
}

// state is one invocation's view of the stand-in's directory.
type state struct {
	dir    string
	shape  string
	failAt map[string]bool
	eng    engine
}

func run(ctx context.Context, args []string) error {
	if p := os.Getenv(envLog); p != "" {
		if err := logArgs(p, args); err != nil {
			return err
		}
	}
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-v") {
		v := os.Getenv(envVersion)
		if v == "" {
			v = "1.2.2"
		}
		fmt.Printf("container CLI version %s (build: release, commit: standin)\n", v)
		return nil
	}
	if len(args) == 0 {
		return usagef("a subcommand is required")
	}
	dir := os.Getenv(envDir)
	if dir == "" {
		return fmt.Errorf("%s is not set: the stand-in keeps its state there", envDir)
	}
	st := &state{dir: dir, shape: os.Getenv(envShape), failAt: map[string]bool{}}
	for _, f := range strings.Split(os.Getenv(envFail), ",") {
		st.failAt[strings.TrimSpace(f)] = true
	}
	switch st.shape {
	case "":
		st.shape = "1.0"
	case "1.0", "0.8", "0.7":
	default:
		return fmt.Errorf("%s=%q: want 1.0, 0.8 or 0.7", envShape, st.shape)
	}
	if args[0] == "system" {
		return systemCmd(args[1:])
	}
	if err := os.MkdirAll(filepath.Join(dir, "containers"), 0o755); err != nil {
		return err
	}
	unlock, err := lockDir(filepath.Join(dir, "lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if a := os.Getenv(envAddr); a != "" {
		addr, err := netip.ParseAddr(a)
		if err != nil || !addr.Is4() {
			return fmt.Errorf("%s=%q: want an IPv4 address", envAddr, a)
		}
		st.eng = &scripted{dir: dir, addr: addr}
	} else if st.eng, err = newSandboxEngine(ctx, dir); err != nil {
		return err
	}
	defer st.eng.close()

	cmd, rest := args[0], args[1:]
	switch cmd {
	case "image", "i":
		if len(rest) == 0 {
			return usagef("image: a subcommand is required")
		}
		switch rest[0] {
		case "load":
			return st.imageLoad(ctx, rest[1:])
		case "list", "ls":
			return st.imageList(ctx, rest[1:])
		}
		return usagef("the stand-in does not implement `image %s`", rest[0])
	case "run":
		return st.runCmd(ctx, rest)
	case "inspect":
		return st.inspect(ctx, rest)
	case "list", "ls":
		return st.list(ctx, rest)
	case "kill", "stop":
		return st.kill(ctx, cmd, rest)
	case "delete", "rm":
		return st.delete(ctx, rest)
	case "stats":
		return st.stats(ctx, rest)
	}
	return usagef("the stand-in does not implement `%s`", cmd)
}

func logArgs(path string, args []string) error {
	b, err := json.Marshal(args)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// injected fails when point is in $TUPPER_CONTAINER_STANDIN_FAIL.
func (st *state) injected(point string) error {
	if st.failAt[point] {
		return fmt.Errorf("injected failure of %s (%s)", point, envFail)
	}
	return nil
}

// opts is a parsed command line: flag values by their long name, and the
// positional arguments.
type opts struct {
	values map[string][]string
	args   []string
}

func (o opts) has(name string) bool { return len(o.values[name]) > 0 }

func (o opts) last(name string) string {
	if v := o.values[name]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// flagSpec is one flag: its long name, short name, and whether it takes a
// value.
type flagSpec struct {
	long, short string
	value       bool
}

// parseArgs reads args against flags, as swift-argument-parser does:
// --long, --long=value, --long value, -s value. With passthrough,
// everything from the first positional argument on is positional (`run
// IMAGE ARGS…`).
func parseArgs(args []string, flags []flagSpec, passthrough bool) (opts, error) {
	o := opts{values: map[string][]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			if passthrough {
				o.args = append(o.args, args[i:]...)
				return o, nil
			}
			o.args = append(o.args, a)
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		j := slices.IndexFunc(flags, func(f flagSpec) bool { return "--"+f.long == name || f.short != "" && "-"+f.short == name })
		if j < 0 {
			return o, usagef("Unknown option '%s'", name)
		}
		f := flags[j]
		switch {
		case !f.value && hasVal:
			return o, usagef("option '%s' takes no value", name)
		case !f.value:
			val = "true"
		case !hasVal:
			if i+1 >= len(args) {
				return o, usagef("Missing value for '%s'", name)
			}
			i++
			val = args[i]
		}
		o.values[f.long] = append(o.values[f.long], val)
	}
	return o, nil
}

// containerName is a valid container name (ManagedContainer.nameValid).
var containerName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// container is the stand-in's record of one container.
type container struct {
	ID          string            `json:"id"`
	Image       imageInfo         `json:"image"`
	Labels      map[string]string `json:"labels"`
	Env         []string          `json:"env"`
	Entrypoint  string            `json:"entrypoint"`
	Args        []string          `json:"args"`
	Mounts      []mount           `json:"mounts"`
	CPUs        int64             `json:"cpus"`
	MemoryBytes int64             `json:"memoryBytes"`
	NProc       uint64            `json:"nproc,omitempty"`
	State       string            `json:"state"` // running or stopped
	Addr        string            `json:"addr,omitempty"`
	Created     time.Time         `json:"created"`
	Started     time.Time         `json:"started,omitzero"`
	// Sandbox is the id of the sandbox the engine runs it in.
	Sandbox string `json:"sandbox,omitempty"`
}

type mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
}

// imageInfo is an image in the stand-in's store.
type imageInfo struct {
	Reference string `json:"reference"`
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

func (st *state) containerPath(id string) string {
	return filepath.Join(st.dir, "containers", id+".json")
}

func (st *state) load(id string) (*container, error) {
	b, err := os.ReadFile(st.containerPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("container with ID %s not found", id)
	} else if err != nil {
		return nil, err
	}
	var c container
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func (st *state) save(c *container) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := st.containerPath(c.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, st.containerPath(c.ID))
}

// all returns every container, by name, with its state refreshed from the
// engine: a sandbox that ended makes its container stopped.
func (st *state) all(ctx context.Context) ([]*container, error) {
	ents, err := os.ReadDir(filepath.Join(st.dir, "containers"))
	if err != nil {
		return nil, err
	}
	var out []*container
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		c, err := st.load(id)
		if err != nil {
			return nil, err
		}
		if err := st.refresh(ctx, c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// refresh marks c stopped when its sandbox no longer runs.
func (st *state) refresh(ctx context.Context, c *container) error {
	if c.State != "running" {
		return nil
	}
	alive, err := st.eng.alive(ctx, c)
	if err != nil || alive {
		return err
	}
	// The VM of a real container is gone when it stops: free what the
	// sandbox still holds.
	if err := st.eng.stop(ctx, c); err != nil {
		return err
	}
	c.State, c.Addr = "stopped", ""
	return st.save(c)
}

var runFlags = []flagSpec{
	{long: "detach", short: "d"},
	{long: "name", value: true},
	{long: "cpus", short: "c", value: true},
	{long: "memory", short: "m", value: true},
	{long: "env", short: "e", value: true},
	{long: "label", short: "l", value: true},
	{long: "mount", value: true},
	{long: "entrypoint", value: true},
	{long: "ulimit", value: true},
	{long: "user", short: "u", value: true},
}

// runCmd is `container run`: create the container, then boot it. A
// container whose boot fails stays, stopped, as the real CLI's does.
func (st *state) runCmd(ctx context.Context, args []string) error {
	o, err := parseArgs(args, runFlags, true)
	if err != nil {
		return err
	}
	if len(o.args) == 0 {
		return usagef("Missing expected argument '<image>'")
	}
	if !o.has("detach") {
		return usagef("the stand-in runs detached containers only (--detach)")
	}
	c := &container{ID: o.last("name"), Labels: map[string]string{}, Env: o.values["env"], Args: o.args[1:],
		Entrypoint: o.last("entrypoint"), CPUs: 4, MemoryBytes: 1 << 30, Created: time.Now().UTC()}
	if c.ID == "" {
		return usagef("the stand-in needs --name")
	}
	if len(c.ID) > 63 || !containerName.MatchString(c.ID) {
		return fmt.Errorf("invalid container name %q: must match %s", c.ID, containerName)
	}
	if c.Entrypoint == "" {
		return usagef("the stand-in needs --entrypoint: it does not run images' own commands")
	}
	if v := o.last("cpus"); v != "" {
		if c.CPUs, err = strconv.ParseInt(v, 10, 64); err != nil || c.CPUs < 1 {
			return fmt.Errorf("invalid --cpus %q: want a whole number of CPUs", v)
		}
	}
	if v := o.last("memory"); v != "" {
		if c.MemoryBytes, err = parseMemory(v); err != nil {
			return err
		}
	}
	for _, l := range o.values["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("invalid label %q: want key=value", l)
		}
		c.Labels[k] = v
	}
	for _, u := range o.values["ulimit"] {
		kind, lim, ok := strings.Cut(u, "=")
		soft, hard, _ := strings.Cut(lim, ":")
		if !ok || kind != "nproc" {
			return fmt.Errorf("the stand-in supports --ulimit nproc=SOFT[:HARD] only, not %q", u)
		}
		if hard == "" {
			hard = soft
		}
		s, err1 := strconv.ParseUint(soft, 10, 64)
		h, err2 := strconv.ParseUint(hard, 10, 64)
		if err1 != nil || err2 != nil || s > h {
			return fmt.Errorf("invalid --ulimit %q", u)
		}
		c.NProc = s
	}
	if u := o.last("user"); u != "" && u != "0:0" && u != "0" && u != "root" {
		return fmt.Errorf("the stand-in runs entrypoints as root only, not as %q", u)
	}
	for _, m := range o.values["mount"] {
		mt, err := parseMount(m)
		if err != nil {
			return err
		}
		c.Mounts = append(c.Mounts, mt)
	}
	if _, err := st.load(c.ID); err == nil {
		return fmt.Errorf("container with id %s already exists", c.ID)
	}
	img, err := st.eng.image(ctx, o.args[0])
	if err != nil {
		return err
	}
	c.Image = *img
	if err := st.injected("run"); err != nil {
		return err
	}
	c.State = "stopped"
	if err := st.save(c); err != nil {
		return err
	}
	if err := st.injected("run-created"); err != nil {
		return err
	}
	if err := st.eng.start(ctx, c); err != nil {
		return fmt.Errorf("failed to bootstrap container %s: %w", c.ID, err)
	}
	c.State, c.Started = "running", time.Now().UTC()
	if err := st.save(c); err != nil {
		return err
	}
	fmt.Println(c.ID)
	return nil
}

// parseMemory reads a memory size as `container` does: a number with an
// optional K, M, G, T or P suffix (binary units), bytes without one.
func parseMemory(s string) (int64, error) {
	num := strings.TrimRight(strings.ToLower(s), "kmgtpib")
	unit := strings.TrimPrefix(strings.ToLower(s), num)
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("invalid memory size %q", s)
	}
	shift := map[string]int{"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20, "g": 30, "gb": 30, "gib": 30, "t": 40, "tb": 40, "tib": 40, "p": 50, "pb": 50, "pib": 50}
	sh, ok := shift[unit]
	if !ok {
		return 0, fmt.Errorf("invalid memory size %q", s)
	}
	if sh == 0 && n < 1<<20 {
		return 0, fmt.Errorf("invalid memory size %q: below 1 MiB", s)
	}
	return n << sh, nil
}

// parseMount reads --mount type=bind,source=…,target=…[,readonly].
func parseMount(s string) (mount, error) {
	var m mount
	var typ string
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "type":
			typ = v
		case "source", "src":
			m.Source = v
		case "target", "dst", "destination":
			m.Target = v
		case "readonly", "ro":
			m.ReadOnly = true
		default:
			return m, fmt.Errorf("invalid mount %q: unknown option %q", s, k)
		}
	}
	if typ != "bind" {
		return m, fmt.Errorf("the stand-in supports bind mounts only, not %q", s)
	}
	if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) {
		return m, fmt.Errorf("invalid mount %q: source and target must be absolute", s)
	}
	if st, err := os.Stat(m.Source); err != nil {
		return m, fmt.Errorf("invalid mount %q: %w", s, err)
	} else if !st.IsDir() {
		return m, fmt.Errorf("invalid mount %q: the source is not a directory", s)
	}
	return m, nil
}

// hostPath maps a path inside container c onto the host through its bind
// mounts.
func (c *container) hostPath(p string) (string, error) {
	for _, m := range c.Mounts {
		if rel, err := filepath.Rel(m.Target, p); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(m.Source, rel), nil
		}
	}
	return "", fmt.Errorf("the stand-in runs entrypoints from a bind mount only, and %s is in none", p)
}

func (st *state) inspect(ctx context.Context, args []string) error {
	o, err := parseArgs(args, nil, false)
	if err != nil {
		return err
	}
	if len(o.args) == 0 {
		return usagef("Missing expected argument '<container-ids> ...'")
	}
	if err := st.injected("inspect"); err != nil {
		return err
	}
	var out []any
	for _, id := range o.args {
		c, err := st.load(id)
		if err != nil {
			return err
		}
		if err := st.refresh(ctx, c); err != nil {
			return err
		}
		out = append(out, st.render(c))
	}
	return printJSON(out)
}

var listFlags = []flagSpec{{long: "all", short: "a"}, {long: "format", value: true}, {long: "quiet", short: "q"}}

func (st *state) list(ctx context.Context, args []string) error {
	o, err := parseArgs(args, listFlags, false)
	if err != nil {
		return err
	}
	if o.last("format") != "json" || len(o.args) > 0 {
		return usagef("the stand-in lists as JSON only (--format json)")
	}
	if err := st.injected("list"); err != nil {
		return err
	}
	all, err := st.all(ctx)
	if err != nil {
		return err
	}
	out := []any{}
	for _, c := range all {
		if c.State == "running" || o.has("all") {
			out = append(out, st.render(c))
		}
	}
	return printJSON(out)
}

var killFlags = []flagSpec{{long: "signal", short: "s", value: true}, {long: "time", short: "t", value: true}}

// kill is `container kill` and `container stop`: the sandbox ends, the
// container stays, stopped. Neither a signal nor a grace period is
// modelled: the sandbox is killed.
func (st *state) kill(ctx context.Context, cmd string, args []string) error {
	o, err := parseArgs(args, killFlags, false)
	if err != nil {
		return err
	}
	if cmd == "kill" && o.has("time") {
		return usagef("Unknown option '--time'")
	}
	if len(o.args) == 0 {
		return usagef("no containers given (the stand-in has no --all)")
	}
	if err := st.injected("kill"); err != nil {
		return err
	}
	for _, id := range o.args {
		c, err := st.load(id)
		if err != nil {
			return err
		}
		if err := st.refresh(ctx, c); err != nil {
			return err
		}
		if c.State != "running" {
			if cmd == "stop" {
				continue
			}
			return fmt.Errorf("container %s is not running", id)
		}
		if err := st.eng.stop(ctx, c); err != nil {
			return err
		}
		c.State, c.Addr = "stopped", ""
		if err := st.save(c); err != nil {
			return err
		}
		fmt.Println(id)
	}
	return nil
}

var deleteFlags = []flagSpec{{long: "force", short: "f"}}

func (st *state) delete(ctx context.Context, args []string) error {
	o, err := parseArgs(args, deleteFlags, false)
	if err != nil {
		return err
	}
	if len(o.args) == 0 {
		return usagef("no containers given (the stand-in has no --all)")
	}
	if err := st.injected("delete"); err != nil {
		return err
	}
	for _, id := range o.args {
		c, err := st.load(id)
		if err != nil {
			return err
		}
		if err := st.refresh(ctx, c); err != nil {
			return err
		}
		if c.State == "running" && !o.has("force") {
			return fmt.Errorf("container %s is running: stop it or delete it with --force", id)
		}
		if err := st.eng.stop(ctx, c); err != nil {
			return err
		}
		if err := os.Remove(st.containerPath(id)); err != nil {
			return err
		}
		fmt.Println(id)
	}
	return nil
}

var statsFlags = []flagSpec{{long: "no-stream"}, {long: "format", value: true}}

func (st *state) stats(ctx context.Context, args []string) error {
	o, err := parseArgs(args, statsFlags, false)
	if err != nil {
		return err
	}
	if !o.has("no-stream") || o.last("format") != "json" {
		return usagef("the stand-in prints one JSON snapshot only (--no-stream --format json)")
	}
	if err := st.injected("stats"); err != nil {
		return err
	}
	out := []any{}
	for _, id := range o.args {
		c, err := st.load(id)
		if err != nil {
			return err
		}
		if err := st.refresh(ctx, c); err != nil {
			return err
		}
		if c.State != "running" {
			return fmt.Errorf("container %s is not running", id)
		}
		s, err := st.eng.stats(ctx, c)
		if err != nil {
			return err
		}
		s.ID = c.ID
		out = append(out, s)
	}
	return printJSON(out)
}

// statsJSON is ContainerStats as `container stats --format json` prints it.
type statsJSON struct {
	ID               string `json:"id"`
	MemoryUsageBytes uint64 `json:"memoryUsageBytes"`
	MemoryLimitBytes uint64 `json:"memoryLimitBytes"`
	CPUUsageUsec     uint64 `json:"cpuUsageUsec"`
	NetworkRxBytes   uint64 `json:"networkRxBytes"`
	NetworkTxBytes   uint64 `json:"networkTxBytes"`
	BlockReadBytes   uint64 `json:"blockReadBytes"`
	BlockWriteBytes  uint64 `json:"blockWriteBytes"`
	NumProcesses     uint64 `json:"numProcesses"`
}

var imageLoadFlags = []flagSpec{{long: "input", short: "i", value: true}}

func (st *state) imageLoad(ctx context.Context, args []string) error {
	o, err := parseArgs(args, imageLoadFlags, false)
	if err != nil {
		return err
	}
	in := o.last("input")
	if in == "" || len(o.args) > 0 {
		return usagef("the stand-in loads from --input only")
	}
	if err := st.injected("image-load"); err != nil {
		return err
	}
	names, err := st.eng.loadImage(ctx, in)
	if err != nil {
		return err
	}
	fmt.Println("Loaded images:")
	for _, n := range names {
		fmt.Println(n)
	}
	return nil
}

var imageListFlags = []flagSpec{{long: "format", value: true}, {long: "quiet", short: "q"}, {long: "verbose", short: "v"}}

// imageList prints ImageDescription, {"reference", "descriptor"}, per
// image, as 0.x and 1.x do.
func (st *state) imageList(ctx context.Context, args []string) error {
	o, err := parseArgs(args, imageListFlags, false)
	if err != nil {
		return err
	}
	if o.last("format") != "json" {
		return usagef("the stand-in lists images as JSON only (--format json)")
	}
	imgs, err := st.eng.images(ctx)
	if err != nil {
		return err
	}
	out := []any{}
	for _, i := range imgs {
		out = append(out, map[string]any{
			"reference":  i.Reference,
			"descriptor": map[string]any{"mediaType": i.MediaType, "digest": i.Digest, "size": i.Size},
		})
	}
	return printJSON(out)
}

var systemStatusFlags = []flagSpec{{long: "format", value: true}, {long: "prefix", short: "p", value: true}}

// systemCmd is `container system status`, which prints its JSON and exits
// 1 when the services are not running.
func systemCmd(args []string) error {
	if len(args) == 0 || args[0] != "status" {
		return usagef("the stand-in implements `system status` only")
	}
	o, err := parseArgs(args[1:], systemStatusFlags, false)
	if err != nil {
		return err
	}
	status := os.Getenv(envSystem)
	if status == "" {
		status = "running"
	}
	s := map[string]any{"status": status, "appRoot": "", "installRoot": "", "apiServerVersion": "", "apiServerCommit": "", "apiServerBuild": "", "apiServerAppName": ""}
	if status == "running" {
		s["appRoot"], s["installRoot"] = "/standin/app", "/standin/install"
		s["apiServerVersion"], s["apiServerCommit"], s["apiServerBuild"], s["apiServerAppName"] = "container-apiserver version 1.2.2", "standin", "release", "container-apiserver"
	}
	if o.last("format") == "json" {
		if err := printJSON(s); err != nil {
			return err
		}
	} else if status == "running" {
		fmt.Println("apiserver is running")
	} else {
		fmt.Println("apiserver is not running")
	}
	if status != "running" {
		os.Exit(1)
	}
	return nil
}

func printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(b, '\n'))
	return err
}

// swiftReference is Foundation's reference date, 2001-01-01: Swift's
// JSONEncoder writes a Date as seconds since it.
var swiftReference = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

func swiftDate(t time.Time) float64 { return t.Sub(swiftReference).Seconds() }

// render is c as the JSON of `list` and `inspect` of the version st.shape
// names: see the apple backend's records.go for the three shapes.
func (st *state) render(c *container) any {
	var nets []any
	if c.State == "running" && c.Addr != "" && !st.failAt["no-address"] {
		a := netip.MustParseAddr(c.Addr)
		prefix := netip.PrefixFrom(a, 24)
		gw := prefix.Masked().Addr().Next()
		if st.shape == "0.7" {
			nets = append(nets, map[string]any{"network": "default", "hostname": c.ID, "address": prefix.String(), "gateway": gw.String()})
		} else {
			nets = append(nets, map[string]any{"network": "default", "hostname": c.ID, "ipv4Address": prefix.String(), "ipv4Gateway": gw.String(), "macAddress": "02:42:ac:11:00:02"})
		}
	}
	if nets == nil {
		nets = []any{}
	}
	var rlimits []any
	if c.NProc > 0 {
		rlimits = append(rlimits, map[string]any{"limit": "RLIMIT_NPROC", "soft": c.NProc, "hard": c.NProc})
	}
	var mounts []any
	for _, m := range c.Mounts {
		var options []string
		if m.ReadOnly {
			options = []string{"ro"}
		}
		mounts = append(mounts, map[string]any{"type": map[string]any{"virtiofs": map[string]any{}}, "source": m.Source, "destination": m.Target, "options": options})
	}
	config := map[string]any{
		"id":     c.ID,
		"image":  map[string]any{"reference": c.Image.Reference, "descriptor": map[string]any{"mediaType": c.Image.MediaType, "digest": c.Image.Digest, "size": c.Image.Size}},
		"labels": c.Labels,
		"initProcess": map[string]any{
			"executable": c.Entrypoint, "arguments": c.Args, "environment": c.Env, "workingDirectory": "/",
			"terminal": false, "user": map[string]any{"id": map[string]any{"uid": 0, "gid": 0}}, "supplementalGroups": []any{}, "rlimits": rlimits,
		},
		"mounts":         mounts,
		"platform":       map[string]any{"os": "linux", "architecture": "arm64"},
		"resources":      map[string]any{"cpus": c.CPUs, "memoryInBytes": c.MemoryBytes},
		"networks":       []any{map[string]any{"network": "default", "options": map[string]any{"hostname": c.ID}}},
		"publishedPorts": []any{},
		"runtimeHandler": "container-runtime-linux",
		"creationDate":   swiftDate(c.Created),
	}
	if st.shape == "1.0" {
		status := map[string]any{"state": c.State, "networks": nets}
		if !c.Started.IsZero() {
			status["startedDate"] = swiftDate(c.Started)
		}
		return map[string]any{"id": c.ID, "configuration": config, "status": status}
	}
	return map[string]any{"status": c.State, "configuration": config, "networks": nets}
}

// engine runs the stand-in's containers and keeps its images.
type engine interface {
	// loadImage stores the images of the OCI archive at path and returns
	// their names.
	loadImage(ctx context.Context, path string) ([]string, error)
	images(ctx context.Context) ([]imageInfo, error)
	image(ctx context.Context, ref string) (*imageInfo, error)
	// start boots c, setting its Addr and Sandbox.
	start(ctx context.Context, c *container) error
	// alive reports whether c's sandbox still runs.
	alive(ctx context.Context, c *container) (bool, error)
	// stop ends c's sandbox and removes what it held.
	stop(ctx context.Context, c *container) error
	stats(ctx context.Context, c *container) (*statsJSON, error)
	close()
}
