package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/network"
	pb "github.com/lightbearco/tupper/proto/process"
)

// TestChaosDaemonKill kills `tupper serve` with SIGKILL at a random moment
// (seeded and logged; TUPPER_CHAOS_SEED replays a run) while creates, a
// kill, uploads and a streaming command are in flight, starts it again, and
// checks what a user relies on:
//
//   - every create that answered 201 is listed and usable, or reported
//     killed with its reason; a create that got no answer left nothing
//     running that is not listed; a sandbox whose kill answered is gone
//     with its reason, one whose kill got no answer is either;
//   - every upload that answered success reads back whole; one that got
//     no answer left the old content, the whole new content, or (where
//     there was none) no file, and never a partial file or a temporary one;
//   - the stream's client learns that the daemon died, and the command can
//     be re-attached after the restart, or is reported gone;
//
// and, once every sandbox is killed through the API and the daemon
// stopped, that no process, mount, veth, firewall chain, cgroup, record,
// network lease or image lease of any sandbox is left.
func TestChaosDaemonKill(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes and kills the daemon repeatedly")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TUPPER_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("TUPPER_CHAOS_SEED=%q: %v", s, err)
		}
	}
	rounds := 3
	if s := os.Getenv("TUPPER_CHAOS_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("TUPPER_CHAOS_ROUNDS=%q: want a positive number", s)
		}
		rounds = n
	}
	t.Logf("chaos seed %d (replay with TUPPER_CHAOS_SEED=%d), %d rounds", seed, seed, rounds)
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))

	d := startServeDaemon(t)
	c := &chaos{d: d, files: map[string]string{}}
	for i := range 2 {
		begin := time.Now()
		sb := d.createSandbox(t, map[string]any{"timeout": 1800, "metadata": map[string]string{"chaos": fmt.Sprintf("long-%d", i)}})
		c.boot = time.Since(begin)
		c.long = append(c.long, sb)
	}
	// The first long-lived sandbox starts with a version of every file,
	// the second with none.
	for r, u := range chaosUploads {
		res := &uploadResult{sb: c.long[0], path: u.path, size: u.size, tag: fmt.Sprintf("%s%s@first", c.long[0].ID, u.path)}
		c.upload(res)
		if res.err != nil || res.status != http.StatusOK {
			t.Fatalf("upload %s: %d %s %v", res.path, res.status, res.body, res.err)
		}
		c.files[res.sb.ID+res.path] = res.tag
		if r == 0 {
			c.transfer = res.elapsed
		}
	}
	t.Logf("here a create takes %v and an upload of %d MiB %v", c.boot.Round(time.Millisecond), chaosUploads[0].size>>20, c.transfer.Round(time.Millisecond))
	// What the long-lived sandboxes keep on the host is in the baseline;
	// what any sandbox leaves is found by its id.
	baseline := testutil.Tree(t, filepath.Join(d.Root, "backends"))

	for r := range rounds {
		if !t.Run(fmt.Sprintf("round %d", r), func(t *testing.T) { c.round(t, r, rng) }) {
			break
		}
	}

	// The end: every sandbox killed through the API, the daemon stopped,
	// and nothing of any sandbox left.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, id := range d.sandboxIDs(ctx, t) {
		status, body, err := d.api(ctx, http.MethodDelete, "/sandboxes/"+id, nil)
		if err != nil || status != http.StatusNoContent {
			t.Errorf("kill sandbox %s: %d %s %v", id, status, body, err)
		}
	}
	d.stop(t)
	ids := c.everyID()
	t.Logf("%d sandboxes over the run", len(ids))
	if left := c.leftovers(t, baseline, ids, nil); len(left) > 0 {
		t.Errorf("after the last kill the host still holds:\n%s", strings.Join(left, "\n"))
	}
	st, err := store.Open(filepath.Join(d.Root, "engine", "tupper.db"))
	if err != nil {
		t.Fatalf("open the daemon's store: %v", err)
	}
	defer st.Close()
	open, _, err := st.List(ctx, store.Query{States: []string{store.StateCreating, store.StateRunning, store.StatePaused}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range open {
		t.Errorf("the store still says sandbox %s is %s", sb.ID, sb.State)
	}
}

// chaos is the state of TestChaosDaemonKill across its rounds.
type chaos struct {
	d    *serveDaemon
	long []*createdSandbox
	// files holds, by sandbox and path, the tag of the content that the
	// file holds as far as the test knows ("" for none).
	files map[string]string
	// ids are the sandboxes the test learned of.
	ids []string
	// boot and transfer are how long a create and the biggest upload
	// took, alone: the kills are timed to fall before, during and after.
	boot, transfer time.Duration
}

// The uploads of each round: one big enough to be cut short, one small
// enough to finish before most kills.
var chaosUploads = []struct {
	path string
	size int64
}{
	{"/home/user/chaos-big.bin", 32 << 20},
	{"/home/user/chaos-small.bin", 256 << 10},
}

// createResult is what one create got: an answer, or an error.
type createResult struct {
	tag       string
	status    int
	sb        createdSandbox
	err       error
	at, ended time.Duration // since the round began
}

// uploadResult is what one upload got.
type uploadResult struct {
	sb      *createdSandbox
	path    string
	old     string // the tag the file held before
	tag     string // the tag of the new content
	size    int64
	status  int
	body    string
	err     error
	elapsed time.Duration
}

func (c *chaos) round(t *testing.T, r int, rng *rand.Rand) {
	d := c.d
	ctx := context.Background()
	// The kill falls anywhere from early in the first operations to
	// after the slowest would finish alone; each operation starts at a
	// random moment before it, so that some are done, some under way and
	// some barely begun.
	creates := 2 + rng.IntN(3)
	span := max(c.boot, c.transfer)
	killAfter := span/5 + time.Duration(rng.Int64N(int64(2*span)))
	startAt := func() time.Duration { return time.Duration(rng.Int64N(int64(killAfter))) }
	mode := rng.IntN(3)
	t.Logf("round %d: %d creates, %d uploads, a stream; SIGKILL %s", r, creates, len(c.long)*len(chaosUploads),
		[]string{"after " + killAfter.Round(time.Millisecond).String(), "while runsc create runs", "while runsc start runs"}[mode])

	// A sandbox to kill while the rest goes on.
	victim := d.createSandbox(t, map[string]any{"timeout": 600, "metadata": map[string]string{"chaos": fmt.Sprintf("r%d-victim", r)}})
	c.ids = append(c.ids, victim.ID)

	// The stream goes first, so that it is surely under way at the kill.
	streamer := d.dataPlane(c.long[0])
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	ticker, err := streamer.proc.Start(streamCtx, sandboxRequest(streamer, &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", `i=0; while :; do echo "tick $i"; i=$((i+1)); sleep 0.1; done`}},
		Tag:     new(fmt.Sprintf("ticker-%d", r)),
	}))
	if err != nil {
		t.Fatalf("start the ticker: %v", err)
	}
	events := receiveAll(ticker, (*pb.StartResponse).GetEvent)
	pid := (<-events).startPID(t)
	collectStdout(t, events, 1)

	var wg sync.WaitGroup
	begin := time.Now()
	createRes := make([]createResult, creates)
	for i := range creates {
		tag := fmt.Sprintf("r%d-%d", r, i)
		at := startAt()
		if i == 0 {
			at = 0
		}
		wg.Go(func() {
			time.Sleep(at)
			createRes[i] = c.create(tag)
			createRes[i].at, createRes[i].ended = at, time.Since(begin)
		})
	}
	var killStatus int
	var killErr error
	killAt := startAt()
	wg.Go(func() {
		time.Sleep(killAt)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		killStatus, _, killErr = d.api(ctx, http.MethodDelete, "/sandboxes/"+victim.ID, nil)
	})
	var uploadRes []*uploadResult
	for _, sb := range c.long {
		for _, u := range chaosUploads {
			res := &uploadResult{sb: sb, path: u.path, size: u.size, old: c.files[sb.ID+u.path], tag: fmt.Sprintf("%s%s@r%d", sb.ID, u.path, r)}
			uploadRes = append(uploadRes, res)
			at := startAt()
			wg.Go(func() {
				time.Sleep(at)
				c.upload(res)
			})
		}
	}
	// Some kills wait for a runsc command of a create to be under way: the
	// daemon's child, which outlives it.
	switch step := []string{"", "create", "start"}[mode]; step {
	case "":
		time.Sleep(time.Until(begin.Add(killAfter)))
	default:
		if !c.waitRunsc(step, begin.Add(killAfter+2*c.boot)) {
			t.Logf("no runsc %s seen in time: the kill comes at %v", step, time.Since(begin).Round(time.Millisecond))
		} else {
			t.Logf("runsc %s is under way at %v: the kill comes now", step, time.Since(begin).Round(time.Millisecond))
		}
	}
	d.crash(t)
	crashedAt := time.Now()

	// The stream's client learns at once that its daemon is gone.
	streamEnded := false
	deadline := time.After(10 * time.Second)
	for !streamEnded {
		select {
		case ev, ok := <-events:
			streamEnded = !ok || ev.err != nil
		case <-deadline:
			t.Fatal("the ticker's stream did not end within 10 s of the daemon's death")
		}
	}
	wg.Wait()
	for _, res := range createRes {
		t.Logf("create %s, sent at %v, ended at %v: %d %s %v", res.tag, res.at.Round(time.Millisecond), res.ended.Round(time.Millisecond), res.status, res.sb.ID, res.err)
		if res.sb.ID != "" {
			c.ids = append(c.ids, res.sb.ID)
		}
	}
	t.Logf("kill %s, sent at %v: %d %v", victim.ID, killAt.Round(time.Millisecond), killStatus, killErr)
	for _, res := range uploadRes {
		t.Logf("upload %s (%d bytes): %d %v after %v", res.tag, res.size, res.status, res.err, res.elapsed.Round(time.Millisecond))
	}

	logAt := int64(len(d.log()))
	d.start(t)
	t.Logf("the daemon was down for %v", time.Since(crashedAt).Round(time.Millisecond))
	for _, line := range strings.Split(d.logSince(logAt), "\n") {
		if strings.Contains(line, "op=recover") || strings.Contains(line, "leftover") || strings.Contains(line, "earlier process") {
			t.Logf("recovery: %s", line)
		}
	}
	listed := d.listSandboxes(t)
	var keep []string
	for id := range listed {
		keep = append(keep, id)
	}

	t.Run("creates", func(t *testing.T) {
		for _, sb := range c.long {
			if _, ok := listed[sb.ID]; !ok {
				t.Errorf("long-lived sandbox %s is not listed after the restart", sb.ID)
			} else if out := d.dataPlane(sb).run(t, "echo ok"); out != "ok\n" {
				t.Errorf("long-lived sandbox %s answered %q", sb.ID, out)
			}
		}
		// A kill that answered has happened; one without an answer may
		// have, or not.
		if _, ok := listed[victim.ID]; ok && killErr == nil && killStatus == http.StatusNoContent {
			t.Errorf("sandbox %s is listed after its kill answered 204", victim.ID)
		} else if ok {
			if out := d.dataPlane(victim).run(t, "echo ok"); out != "ok\n" {
				t.Errorf("sandbox %s, whose kill got no answer, is listed and answered %q", victim.ID, out)
			}
		} else if status, body := d.getSandbox(t, victim.ID); status != http.StatusNotFound || !strings.Contains(string(body), "killed") {
			t.Errorf("sandbox %s is not listed, and GET answers %d %s; want 404 saying why it was killed", victim.ID, status, body)
		}
		answered := map[string]bool{}
		for _, res := range createRes {
			if res.status != http.StatusCreated {
				continue
			}
			answered[res.tag] = true
			if _, ok := listed[res.sb.ID]; ok {
				if out := d.dataPlane(&res.sb).run(t, "echo ok"); out != "ok\n" {
					t.Errorf("sandbox %s (create %s answered 201) answered %q", res.sb.ID, res.tag, out)
				}
				continue
			}
			status, body := d.getSandbox(t, res.sb.ID)
			if status != http.StatusNotFound || !strings.Contains(string(body), "killed") {
				t.Errorf("sandbox %s (create %s answered 201) is not listed, and GET answers %d %s; want it listed, or 404 saying why it was killed", res.sb.ID, res.tag, status, body)
			}
		}
		// A create whose answer was lost may have finished: its sandbox
		// is listed, and must work as any other.
		for id, md := range listed {
			tag := md["chaos"]
			if !strings.HasPrefix(tag, fmt.Sprintf("r%d-", r)) || answered[tag] || id == victim.ID {
				continue
			}
			t.Logf("create %s got no answer and made sandbox %s", tag, id)
			c.ids = append(c.ids, id)
			sb := c.connect(t, id)
			if out := d.dataPlane(sb).run(t, "echo ok"); out != "ok\n" {
				t.Errorf("sandbox %s (create %s got no answer, listed) answered %q", id, tag, out)
			}
		}
		// Whatever a create left that is not listed was stopped at the
		// restart: nothing of the daemon's runs but listed sandboxes.
		if left := c.leftovers(t, nil, nil, keep); len(left) > 0 {
			t.Errorf("after the restart the host runs what is not listed:\n%s", strings.Join(left, "\n"))
		}
	})

	t.Run("uploads", func(t *testing.T) {
		for _, sb := range c.long {
			conn := d.dataPlane(sb)
			var got map[string]string
			// A write whose body arrived whole before the kill may still
			// be finishing in the agent.
			testutil.WaitFor(t, 30*time.Second, "no upload in progress in "+sb.ID, func() bool {
				got = c.fileState(t, conn)
				return got["temporary"] == "0"
			})
			for _, res := range uploadRes {
				if res.sb != sb {
					continue
				}
				state := got[res.path]
				newState := chaosContent(res.tag, res.size)
				oldState := "absent"
				if res.old != "" {
					oldState = chaosContent(res.old, sizeOf(res.old))
				}
				switch {
				case res.err == nil && res.status == http.StatusOK:
					if state != newState {
						t.Errorf("upload %s answered %d, and %s holds %s; want the whole new content %s", res.tag, res.status, res.path, state, newState)
					}
				case state == newState:
					c.files[sb.ID+res.path] = res.tag
				case state != oldState:
					t.Errorf("upload %s got %d %s %v, and %s holds %s; want the old content (%s) or the whole new one (%s)",
						res.tag, res.status, res.body, res.err, res.path, state, oldState, newState)
				}
				if res.err == nil && res.status == http.StatusOK {
					c.files[sb.ID+res.path] = res.tag
				}
			}
		}
	})

	t.Run("stream", func(t *testing.T) {
		attachCtx, detach := context.WithCancel(ctx)
		defer detach()
		again, err := streamer.proc.Connect(attachCtx, sandboxRequest(streamer, &pb.ConnectRequest{
			Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
		}))
		if err != nil {
			t.Fatalf("re-attach to the ticker (pid %d): %v", pid, err)
		}
		evs := receiveAll(again, (*pb.ConnectResponse).GetEvent)
		first := <-evs
		if first.err != nil {
			// Reported gone is a fair answer; a silent hang is not.
			if connect.CodeOf(first.err) != connect.CodeNotFound {
				t.Errorf("re-attach to the ticker (pid %d): %v; want its events or a clear not found", pid, first.err)
			}
			return
		}
		if got := first.startPID(t); got != pid {
			t.Errorf("re-attached to pid %d, want %d", got, pid)
		}
		collectStdout(t, evs, 2)
		if _, err := streamer.proc.SendSignal(ctx, sandboxRequest(streamer, &pb.SendSignalRequest{
			Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
			Signal:  pb.Signal_SIGNAL_SIGKILL,
		})); err != nil {
			t.Errorf("kill the ticker: %v", err)
		}
	})

	// This round's sandboxes go, so that the rounds do not pile up on a
	// small machine; the long-lived ones stay.
	for id, md := range listed {
		if !strings.HasPrefix(md["chaos"], fmt.Sprintf("r%d-", r)) {
			continue
		}
		status, body, err := d.api(ctx, http.MethodDelete, "/sandboxes/"+id, nil)
		if err != nil || status != http.StatusNoContent {
			t.Errorf("kill sandbox %s: %d %s %v", id, status, body, err)
		}
	}
}

// waitRunsc waits until the daemon runs `runsc <step>`, and reports false
// when it did not by deadline. It watches the daemon's own children, and
// often: runsc steps last a few hundred milliseconds.
func (c *chaos) waitRunsc(step string, deadline time.Time) bool {
	for time.Now().Before(deadline) && c.d.running() {
		for _, pid := range testutil.Descendants(c.d.cmd.Process.Pid) {
			if args := testutil.CommandLine(pid); len(args) > 0 && filepath.Base(args[0]) == "runsc" && slices.Contains(args, step) {
				return true
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// create sends POST /sandboxes and says what came back.
func (c *chaos) create(tag string) createResult {
	res := createResult{tag: tag}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	status, body, err := c.d.api(ctx, http.MethodPost, "/sandboxes", map[string]any{
		"templateID": "base", "timeout": 600, "metadata": map[string]string{"chaos": tag},
	})
	res.status, res.err = status, err
	if err == nil && status == http.StatusCreated {
		if err := json.Unmarshal(body, &res.sb); err != nil || res.sb.ID == "" {
			res.err = fmt.Errorf("create answered %s: %v", body, err)
		}
	}
	return res
}

// connect reads sandbox id's access token, as a client reconnecting would.
func (c *chaos) connect(t *testing.T, id string) *createdSandbox {
	t.Helper()
	status, body := c.d.getSandbox(t, id)
	var sb createdSandbox
	if err := json.Unmarshal(body, &sb); status != http.StatusOK || err != nil {
		t.Fatalf("GET /sandboxes/%s = %d %s (%v)", id, status, body, err)
	}
	return &sb
}

// upload streams res's content to its path through the data plane, as
// the E2B SDKs do (one multipart part), and records the answer.
func (c *chaos) upload(res *uploadResult) {
	begin := time.Now()
	defer func() { res.elapsed = time.Since(begin) }()
	pr, pw := io.Pipe()
	const boundary = "tupperchaos"
	go func() {
		fmt.Fprintf(pw, "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=%q\r\nContent-Type: application/octet-stream\r\n\r\n", boundary, res.path)
		if _, err := io.Copy(pw, chaosReader(res.tag, res.size)); err != nil {
			pw.CloseWithError(err)
			return
		}
		fmt.Fprintf(pw, "\r\n--%s--\r\n", boundary)
		pw.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.d.URL+"/files?"+url.Values{"path": {res.path}, "username": {"user"}}.Encode(), pr)
	if err != nil {
		res.err = err
		return
	}
	req.Header.Set("Content-Type", "multipart/form-data; boundary="+boundary)
	req.Header.Set("E2b-Sandbox-Id", res.sb.ID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", res.sb.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		pr.CloseWithError(err)
		res.err = err
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	res.status, res.body, res.err = resp.StatusCode, string(body), err
}

// fileState describes the upload targets in the sandbox of conn, by path,
// as chaosContent does, and counts the uploads' temporary files under
// "temporary".
func (c *chaos) fileState(t *testing.T, conn *sandboxConn) map[string]string {
	t.Helper()
	var script strings.Builder
	for _, u := range chaosUploads {
		fmt.Fprintf(&script, `f=%s; if [ -e "$f" ]; then echo "$f $(stat -c %%s "$f") $(sha256sum < "$f" | cut -c1-64)"; else echo "$f absent"; fi; `, u.path)
	}
	script.WriteString(`echo "temporary $(ls -A /home/user | grep -c '^\.tupper-upload-')"`)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(conn.run(t, script.String())), "\n") {
		path, rest, _ := strings.Cut(line, " ")
		got[path] = rest
	}
	return got
}

// chaosContent describes the content of tag as fileState does: its size
// and SHA-256.
func chaosContent(tag string, size int64) string {
	h := sha256.New()
	io.Copy(h, chaosReader(tag, size))
	return fmt.Sprintf("%d %s", size, hex.EncodeToString(h.Sum(nil)))
}

// chaosReader yields size bytes that only tag makes.
func chaosReader(tag string, size int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8(sha256.Sum256([]byte(tag))), size)
}

// sizeOf returns the size of an upload's content from its tag.
func sizeOf(tag string) int64 {
	for _, u := range chaosUploads {
		if strings.Contains(tag, u.path+"@") {
			return u.size
		}
	}
	return 0
}

// logIDs finds in a daemon log the ids of every sandbox it mentions:
// creates that got no answer are known only there.
var logIDs = regexp.MustCompile(`sandbox=([a-z0-9]{20})\b`)

// everyID returns every sandbox id the test or the daemon's log knows.
func (c *chaos) everyID() []string {
	ids := slices.Clone(c.ids)
	for _, sb := range c.long {
		ids = append(ids, sb.ID)
	}
	for _, m := range logIDs.FindAllStringSubmatch(c.d.log(), -1) {
		ids = append(ids, m[1])
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// leftovers lists what the host holds of the daemon's sandboxes but those
// in keep, with baseline as testutil.Leaks has it. A daemon that runs is
// no leftover.
func (c *chaos) leftovers(t *testing.T, baseline map[string]bool, ids, keep []string) []string {
	t.Helper()
	if ids == nil {
		ids = slices.DeleteFunc(c.everyID(), func(id string) bool { return slices.Contains(keep, id) })
	}
	netDir := filepath.Join(c.d.Root, "backends", "gvisor", "net")
	var ifs []string
	for _, id := range ids {
		ifs = append(ifs, network.HostIfName(network.DefaultIfPrefix, netDir, id))
	}
	var ignore []int
	if c.d.running() {
		ignore = append(ignore, c.d.cmd.Process.Pid)
	}
	return testutil.Leftovers(t, testutil.Leaks{
		Root: c.d.Root, Baseline: baseline, ImageRoot: c.d.imageRoot,
		IDs: ids, HostIfs: ifs, Keep: keep, IgnorePIDs: ignore,
	})
}
