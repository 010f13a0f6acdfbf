package oom

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// holdEnv makes the test binary a helper process that holds the given
// number of MiB resident and sleeps.
const holdEnv = "TUPPER_OOM_TEST_HOLD_MIB"

func TestMain(m *testing.M) {
	if v := os.Getenv(holdEnv); v != "" {
		mib, _ := strconv.Atoi(v)
		b := make([]byte, mib<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("ready")
		time.Sleep(time.Minute)
		fmt.Println(len(b))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseMeminfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    meminfo
		wantErr bool
	}{
		{
			name: "gvisor",
			in:   "MemTotal:        1048576 kB\nMemFree:         1033100 kB\nMemAvailable:    1033000 kB\nBuffers:               0 kB\n",
			want: meminfo{Total: 1048576 << 10, Available: 1033000 << 10},
		},
		{
			name: "no MemAvailable",
			in:   "MemTotal: 2048 kB\nMemFree: 1024 kB\n",
			want: meminfo{Total: 2048 << 10, Available: 1024 << 10},
		},
		{name: "no total", in: "MemFree: 1024 kB\n", wantErr: true},
		{name: "no free", in: "MemTotal: 1024 kB\n", wantErr: true},
		{name: "garbage value", in: "MemTotal: x kB\nMemFree: 1 kB\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMeminfo([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("= %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	// Fields as Linux and gVisor print them: state is field 3, starttime
	// field 22, rss field 24 (pages).
	line := "42 (we (ird) name) S 1 42 42 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 777 123456 300 18446744073709551615 0 0 0\n"
	got, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := proc{comm: "we (ird) name", state: 'S', pgrp: 42, startTime: 777, rss: 300 * pageSize}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(proc{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := parseStat([]byte("42 (short) S 1 2\n")); err == nil {
		t.Error("a short line parsed")
	}
}

func TestPickVictim(t *testing.T) {
	const total = 1000 << 20
	tests := []struct {
		name  string
		procs []proc
		want  int // pid; 0 for none
	}{
		{name: "none", want: 0},
		{name: "largest", procs: []proc{{pid: 2, rss: 10 << 20}, {pid: 3, rss: 300 << 20}, {pid: 4, rss: 20 << 20}}, want: 3},
		{name: "-1000 spares", procs: []proc{{pid: 2, rss: 10 << 20}, {pid: 3, rss: 300 << 20, adj: -1000}}, want: 2},
		{name: "only spared", procs: []proc{{pid: 3, rss: 300 << 20, adj: -1000}}, want: 0},
		// +500 on 1000 MiB adds 500 MiB to the score, as in Linux.
		{name: "adj raises", procs: []proc{{pid: 2, rss: 10 << 20, adj: 500}, {pid: 3, rss: 300 << 20}}, want: 2},
		{name: "adj lowers", procs: []proc{{pid: 2, rss: 200 << 20}, {pid: 3, rss: 300 << 20, adj: -200}}, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := pickVictim(tt.procs, total)
			if !ok {
				got.pid = 0
			}
			if got.pid != tt.want {
				t.Errorf("victim %d, want %d", got.pid, tt.want)
			}
		})
	}
}

func TestInterval(t *testing.T) {
	const total = 1 << 30
	tests := []struct {
		avail int64
		want  time.Duration
	}{
		{total, time.Second},
		{total * 3 / 5, 100 * time.Millisecond},
		{total / 3, 50 * time.Millisecond},
		{total / 5, 20 * time.Millisecond},
		{total / 20, 5 * time.Millisecond},
		{0, 5 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := interval(meminfo{Total: total, Available: tt.avail}); got != tt.want {
			t.Errorf("interval(avail %d MiB) = %v, want %v", tt.avail>>20, got, tt.want)
		}
	}
}

// fakeProc is a procfs for the watcher: a meminfo file the test writes,
// and links to the real /proc entries of the processes the test started.
type fakeProc struct {
	dir string
	mi  *os.File
}

func newFakeProc(t *testing.T) *fakeProc {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "meminfo"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &fakeProc{dir: dir, mi: f}
}

// setMeminfo rewrites meminfo in place, at a fixed width, so that a
// reader never sees it empty.
func (p *fakeProc) setMeminfo(t *testing.T, totalMiB, availMiB int64) {
	t.Helper()
	s := fmt.Sprintf("MemTotal:     %12d kB\nMemFree:      %12d kB\nMemAvailable: %12d kB\n", totalMiB<<10, availMiB<<10, availMiB<<10)
	if _, err := p.mi.WriteAt([]byte(s), 0); err != nil {
		t.Fatal(err)
	}
}

// start runs a helper holding mib MiB and links it into the procfs.
func (p *fakeProc) start(t *testing.T, mib int) *exec.Cmd {
	t.Helper()
	return p.startIn(t, mib, -1)
}

// startIn is start with the helper in process group pgid: 0 makes a new
// group led by the helper, -1 leaves it in the test's.
func (p *fakeProc) startIn(t *testing.T, mib, pgid int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if pgid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	}
	cmd.Env = append(os.Environ(), holdEnv+"="+strconv.Itoa(mib))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("helper: %q %v", buf, err)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	if err := os.Symlink(filepath.Join("/proc", pid), filepath.Join(p.dir, pid)); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// runWatcher runs w until the returned stop is called, which checks that
// Run ended as it should, with the cancellation.
func runWatcher(t *testing.T, w *Watcher) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run = %v", err)
		}
	}
}

func TestWatcherKillsTheLargest(t *testing.T) {
	p := newFakeProc(t)
	p.setMeminfo(t, 1024, 900)
	small := p.start(t, 1)
	big := p.start(t, 64)

	var mu sync.Mutex
	var marked []int
	w := New(Config{
		Proc: p.dir,
		Mark: func(pid int, reason string) func() {
			mu.Lock()
			defer mu.Unlock()
			if reason != "the sandbox's memory limit is 1024 MiB" {
				t.Errorf("reason %q", reason)
			}
			marked = append(marked, pid)
			// What the victim frees, as the sandbox's kernel would
			// report it once the victim is gone.
			p.setMeminfo(t, 1024, 900)
			return func() {}
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	defer runWatcher(t, w)()

	// Plenty available: nothing happens.
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	if len(marked) != 0 {
		t.Fatalf("killed %v with 900 of 1024 MiB available", marked)
	}
	mu.Unlock()

	// Available falls under the slack (16 MiB of 1024): the big one goes.
	p.setMeminfo(t, 1024, 8)
	exited := make(chan error, 1)
	go func() { exited <- big.Wait() }()
	select {
	case err := <-exited:
		ws, _ := big.ProcessState.Sys().(syscall.WaitStatus)
		if err == nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("big helper ended with %v, want SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the big helper was not killed within 10s")
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(marked) != 1 || marked[0] != big.Process.Pid {
		t.Errorf("marked %v, want only the big helper %d", marked, big.Process.Pid)
	}
	if err := small.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the small helper was hit: %v", err)
	}
}

// Over the limit with only spared processes, the watcher kills nothing
// and goes on watching.
func TestWatcherSparesAdjMinus1000(t *testing.T) {
	p := newFakeProc(t)
	p.setMeminfo(t, 1024, 900)
	spared := p.start(t, 8)
	// Its entry: the real stat, and an oom_score_adj of -1000 (writing the
	// real one takes CAP_SYS_RESOURCE, which a test may lack).
	dir := filepath.Join(p.dir, strconv.Itoa(spared.Process.Pid))
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fmt.Sprintf("/proc/%d/stat", spared.Process.Pid), filepath.Join(dir, "stat")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oom_score_adj"), []byte("-1000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	marked := 0
	w := New(Config{
		Proc: p.dir,
		Mark: func(int, string) func() {
			mu.Lock()
			defer mu.Unlock()
			marked++
			return func() {}
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	stop := runWatcher(t, w)
	p.setMeminfo(t, 1024, 4)
	time.Sleep(500 * time.Millisecond)
	stop()
	if marked != 0 {
		t.Errorf("marked %d processes, want none", marked)
	}
	if err := spared.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the spared helper was killed: %v", err)
	}
}

func TestRunNeedsMeminfo(t *testing.T) {
	w := New(Config{Proc: t.TempDir()})
	if err := w.Run(context.Background()); err == nil {
		t.Error("Run without meminfo returned nil")
	}
}

// TestWatcherWaitsForFiguresToCatchUp: gVisor's figures lag a victim's
// exit. The watcher must not take a second process for the same spike
// while they still show the sandbox out of memory.
func TestWatcherWaitsForFiguresToCatchUp(t *testing.T) {
	p := newFakeProc(t)
	p.setMeminfo(t, 1024, 900)
	small := p.start(t, 8)
	big := p.start(t, 64)
	var mu sync.Mutex
	var marked []int
	w := New(Config{
		Proc: p.dir,
		Mark: func(pid int, reason string) func() {
			mu.Lock()
			marked = append(marked, pid)
			mu.Unlock()
			// The freed memory shows only 150 ms after the kill.
			time.AfterFunc(150*time.Millisecond, func() { p.setMeminfo(t, 1024, 900) })
			return func() {}
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	stop := runWatcher(t, w)
	p.setMeminfo(t, 1024, 8)
	if err := big.Wait(); err == nil {
		t.Fatal("the big helper exited by itself")
	}
	time.Sleep(400 * time.Millisecond)
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(marked) != 1 || marked[0] != big.Process.Pid {
		t.Errorf("marked %v, want only the big helper %d", marked, big.Process.Pid)
	}
	if err := small.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the small helper was taken while the figures lagged: %v", err)
	}
}

// TestWatcherKillsAGroupThatRefills: a second kill in the same process
// group within escalateWindow takes the whole group (a fork bomb's
// children refill what one kill frees); a process of another group lives,
// though it is larger than one of the group's. Killed one at a time, the
// outsider would go before the group's smallest.
func TestWatcherKillsAGroupThatRefills(t *testing.T) {
	p := newFakeProc(t)
	p.setMeminfo(t, 1024, 900)
	outsider := p.startIn(t, 16, 0)
	leader := p.startIn(t, 64, 0)
	member1 := p.startIn(t, 48, leader.Process.Pid)
	member2 := p.startIn(t, 2, leader.Process.Pid)
	var mu sync.Mutex
	var marked []int
	w := New(Config{
		Proc: p.dir,
		Mark: func(pid int, reason string) func() {
			mu.Lock()
			defer mu.Unlock()
			marked = append(marked, pid)
			if pid == member2.Process.Pid {
				// The whole group goes: the sandbox has memory again.
				p.setMeminfo(t, 1024, 900)
			}
			return func() {}
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	stop := runWatcher(t, w)
	defer stop()
	// The figures never recover: the group keeps the sandbox out of memory.
	p.setMeminfo(t, 1024, 8)
	for _, c := range []*exec.Cmd{leader, member1, member2} {
		waited := make(chan error, 1)
		go func() { waited <- c.Wait() }()
		select {
		case <-waited:
			ws, _ := c.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("pid %d ended with %v, want SIGKILL", c.Process.Pid, c.ProcessState)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("pid %d of the group was not killed within 10s", c.Process.Pid)
		}
	}
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	got := append([]int(nil), marked...)
	mu.Unlock()
	// The leader alone first, then the group: both members marked.
	if len(got) < 3 || got[0] != leader.Process.Pid {
		t.Errorf("marked %v, want the leader %d first, then the group", got, leader.Process.Pid)
	}
	for _, c := range []*exec.Cmd{member1, member2} {
		found := false
		for _, pid := range got {
			found = found || pid == c.Process.Pid
		}
		if !found {
			t.Errorf("member %d was not marked: %v", c.Process.Pid, got)
		}
	}
	for _, pid := range got {
		if pid == outsider.Process.Pid {
			t.Errorf("the process of another group was killed: marked %v", got)
		}
	}
	if q, err := readProc("/proc", outsider.Process.Pid); err != nil || q.state == 'Z' {
		t.Errorf("the process of another group is gone: %v %c", err, q.state)
	}
}

// TestOthersRun: the watcher looks once a second only while nothing but
// the agent runs; a process in the table makes it look closely.
func TestOthersRun(t *testing.T) {
	p := newFakeProc(t)
	p.setMeminfo(t, 1024, 1000)
	w := New(Config{Proc: p.dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := os.Symlink(fmt.Sprintf("/proc/%d", os.Getpid()), filepath.Join(p.dir, strconv.Itoa(os.Getpid()))); err != nil {
		t.Fatal(err)
	}
	if w.othersRun() {
		t.Error("othersRun with only the watcher's own process")
	}
	p.start(t, 1)
	if !w.othersRun() {
		t.Error("othersRun is false with another process")
	}
}
