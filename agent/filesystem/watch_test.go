package filesystem_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/filesystem"
	"github.com/lightbearco/tupper/agent/filesystem/userfs"
	"github.com/lightbearco/tupper/agent/identity"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
	"github.com/lightbearco/tupper/proto/filesystem/filesystemconnect"
)

// ev is a filesystem event reduced to what tests compare.
type ev struct {
	name string
	typ  fspb.EventType
}

func (e ev) String() string {
	return fmt.Sprintf("%s %s", strings.TrimPrefix(e.typ.String(), "EVENT_TYPE_"), e.name)
}

var (
	create = fspb.EventType_EVENT_TYPE_CREATE
	write  = fspb.EventType_EVENT_TYPE_WRITE
	remove = fspb.EventType_EVENT_TYPE_REMOVE
	rename = fspb.EventType_EVENT_TYPE_RENAME
)

// watchStream is a running WatchDir call whose responses a goroutine pumps
// into a channel, so tests can wait with timeouts.
type watchStream struct {
	responses chan *fspb.WatchDirResponse
	done      chan error // receives the stream's final error (nil when it ended cleanly)
	seen      []ev       // filesystem events received so far
}

func startWatchDir(t *testing.T, c filesystemconnect.FilesystemClient, r *connect.Request[fspb.WatchDirRequest]) *watchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.WatchDir(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	w := &watchStream{responses: make(chan *fspb.WatchDirResponse, 1024), done: make(chan error, 1)}
	go func() {
		for stream.Receive() {
			w.responses <- stream.Msg()
		}
		w.done <- stream.Err()
		close(w.responses)
	}()
	select {
	case first, ok := <-w.responses:
		if !ok {
			t.Fatalf("stream ended before its start event: %v", <-w.done)
		}
		if first.GetStart() == nil {
			t.Fatalf("first event = %v, want start", first)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no start event")
	}
	return w
}

// expect waits until the events received so far contain want in order (not
// necessarily adjacent: inotify may add WRITEs or CHMODs in between).
func (w *watchStream) expect(t *testing.T, want ...ev) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for !containsInOrder(w.seen, want) {
		select {
		case r, ok := <-w.responses:
			if !ok {
				t.Fatalf("stream ended (%v); got %v, want %v", <-w.done, w.seen, want)
			}
			if fe := r.GetFilesystem(); fe != nil {
				w.seen = append(w.seen, ev{fe.GetName(), fe.GetType()})
			}
		case <-deadline:
			t.Fatalf("timed out; got %v, want %v in order", w.seen, want)
		}
	}
}

func containsInOrder(got, want []ev) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

func TestWatchDir(t *testing.T) {
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		t.Run("create write remove", func(t *testing.T) {
			dir := t.TempDir()
			w := startWatchDir(t, c, req(&fspb.WatchDirRequest{Path: dir}, ""))
			p := filepath.Join(dir, unicodeName)
			mustWrite(t, p, "one")
			w.expect(t, ev{unicodeName, create}, ev{unicodeName, write})
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("two")
			f.Close()
			w.expect(t, ev{unicodeName, create}, ev{unicodeName, write}, ev{unicodeName, write})
			if err := os.Rename(p, filepath.Join(dir, "renamed")); err != nil {
				t.Fatal(err)
			}
			w.expect(t, ev{unicodeName, rename}, ev{"renamed", create})
			if err := os.Remove(filepath.Join(dir, "renamed")); err != nil {
				t.Fatal(err)
			}
			w.expect(t, ev{"renamed", remove})
			// Not recursive: changes in subdirectories go unreported.
			mustMkdir(t, filepath.Join(dir, "sub"))
			mustWrite(t, filepath.Join(dir, "sub", "hidden"), "x")
			mustWrite(t, filepath.Join(dir, "marker"), "x")
			w.expect(t, ev{"sub", create}, ev{"marker", create})
			for _, e := range w.seen {
				if strings.HasPrefix(e.name, "sub/") {
					t.Errorf("non-recursive watch reported %v", e)
				}
			}
		})

		t.Run("upload lands as create then write", func(t *testing.T) {
			dir := t.TempDir()
			w := startWatchDir(t, c, req(&fspb.WatchDirRequest{Path: dir}, ""))
			root, err := identity.Lookup("root")
			if err != nil {
				t.Fatal(err)
			}
			// The way /files writes: a temporary file renamed into place.
			if _, err := userfs.WriteFile(filepath.Join(dir, "up.txt"), strings.NewReader("data"), root); err != nil {
				t.Fatal(err)
			}
			w.expect(t, ev{"up.txt", create}, ev{"up.txt", write})
			for _, e := range w.seen {
				if e.name != "up.txt" {
					t.Errorf("the upload's temporary file showed: %v", e)
				}
			}
		})

		t.Run("recursive", func(t *testing.T) {
			dir := t.TempDir()
			mustMkdir(t, filepath.Join(dir, "old"))
			w := startWatchDir(t, c, req(&fspb.WatchDirRequest{Path: dir, Recursive: true}, ""))
			mustWrite(t, filepath.Join(dir, "old", "f"), "x")
			w.expect(t, ev{"old/f", create}, ev{"old/f", write})
			// A directory created after the watch started, written to
			// at once, and again after its watch surely exists.
			mustMkdir(t, filepath.Join(dir, "new dir", "deep"))
			mustWrite(t, filepath.Join(dir, "new dir", "deep", "g"), "x")
			w.expect(t, ev{"new dir", create})
			w.expect(t, ev{"new dir/deep", create})
			w.expect(t, ev{"new dir/deep/g", create})
			mustWrite(t, filepath.Join(dir, "new dir", "deep", "h"), "x")
			w.expect(t, ev{"new dir/deep/h", create}, ev{"new dir/deep/h", write})
			if err := os.Remove(filepath.Join(dir, "new dir", "deep", "h")); err != nil {
				t.Fatal(err)
			}
			w.expect(t, ev{"new dir/deep/h", remove})
			// A moved directory is watched under its new name.
			if err := os.Rename(filepath.Join(dir, "new dir"), filepath.Join(dir, "moved")); err != nil {
				t.Fatal(err)
			}
			w.expect(t, ev{"new dir", rename}, ev{"moved", create})
			mustWrite(t, filepath.Join(dir, "moved", "deep", "i"), "x")
			w.expect(t, ev{"moved/deep/i", create})
			for _, e := range w.seen {
				if strings.HasPrefix(e.name, "new dir/deep/i") {
					t.Errorf("event under the old name: %v", e)
				}
			}
			if err := os.RemoveAll(filepath.Join(dir, "moved")); err != nil {
				t.Fatal(err)
			}
			w.expect(t, ev{"moved/deep/i", remove}, ev{"moved", remove})
			n := 0
			for _, e := range w.seen {
				if e == (ev{"new dir", rename}) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("rename of a watched directory reported %d times, want once: %v", n, w.seen)
			}
		})

		t.Run("include entry", func(t *testing.T) {
			dir := t.TempDir()
			w := startWatchDir(t, c, req(&fspb.WatchDirRequest{Path: dir, IncludeEntry: true}, ""))
			mustWrite(t, filepath.Join(dir, "f"), "abc")
			deadline := time.After(5 * time.Second)
			for {
				select {
				case r := <-w.responses:
					fe := r.GetFilesystem()
					if fe == nil {
						continue
					}
					e := fe.GetEntry()
					if e == nil || e.GetPath() != filepath.Join(dir, "f") || e.GetType() != fspb.FileType_FILE_TYPE_FILE {
						t.Fatalf("event %v: want an entry for the file", fe)
					}
					return
				case <-deadline:
					t.Fatal("no event")
				}
			}
		})

		t.Run("keepalive", func(t *testing.T) {
			r := req(&fspb.WatchDirRequest{Path: t.TempDir()}, "")
			r.Header().Set("Keepalive-Ping-Interval", "1")
			w := startWatchDir(t, c, r)
			select {
			case r := <-w.responses:
				if r.GetKeepalive() == nil {
					t.Fatalf("got %v, want a keepalive", r)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("no keepalive within 3s at a 1s interval")
			}
		})

		t.Run("watched directory removed", func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "gone")
			mustMkdir(t, dir)
			w := startWatchDir(t, c, req(&fspb.WatchDirRequest{Path: dir}, ""))
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-w.done:
				if got := codeOf(err); got != connect.CodeNotFound {
					t.Fatalf("stream ended with %v, want not_found", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("stream did not end")
			}
		})

		t.Run("bad paths", func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "file")
			mustWrite(t, file, "x")
			for _, tt := range []struct {
				name, path string
				code       connect.Code
			}{
				{"missing", filepath.Join(dir, "missing"), connect.CodeNotFound},
				{"file", file, connect.CodeInvalidArgument},
			} {
				t.Run(tt.name, func(t *testing.T) {
					stream, err := c.WatchDir(context.Background(), req(&fspb.WatchDirRequest{Path: tt.path}, ""))
					if err == nil {
						for stream.Receive() {
							t.Errorf("unexpected event %v", stream.Msg())
						}
						err = stream.Err()
						stream.Close()
					}
					if got := codeOf(err); got != tt.code {
						t.Fatalf("code = %v, want %v (err %v)", got, tt.code, err)
					}
				})
			}
		})
	})
}

func TestPollingWatcher(t *testing.T) {
	forEachCodec(t, filesystem.Config{MaxWatcherEvents: 100}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		ctx := context.Background()
		dir := t.TempDir()
		mustMkdir(t, filepath.Join(dir, "sub"))
		cr, err := c.CreateWatcher(ctx, req(&fspb.CreateWatcherRequest{Path: dir, Recursive: true}, ""))
		if err != nil {
			t.Fatal(err)
		}
		id := cr.Msg.GetWatcherId()
		if id == "" {
			t.Fatal("empty watcher id")
		}
		poll := func() []ev {
			t.Helper()
			res, err := c.GetWatcherEvents(ctx, req(&fspb.GetWatcherEventsRequest{WatcherId: id}, ""))
			if err != nil {
				t.Fatal(err)
			}
			var got []ev
			for _, e := range res.Msg.GetEvents() {
				got = append(got, ev{e.GetName(), e.GetType()})
			}
			return got
		}
		waitFor := func(want ...ev) {
			t.Helper()
			var got []ev
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if got = append(got, poll()...); containsInOrder(got, want) {
					return
				}
			}
			t.Fatalf("got %v, want %v in order", got, want)
		}
		mustWrite(t, filepath.Join(dir, "a"), "x")
		mustWrite(t, filepath.Join(dir, "sub", "b"), "x")
		waitFor(ev{"a", create}, ev{"a", write}, ev{"sub/b", create}, ev{"sub/b", write})
		// Drained: nothing new until something changes.
		time.Sleep(50 * time.Millisecond)
		if got := poll(); len(got) != 0 {
			t.Errorf("second poll = %v, want nothing", got)
		}
		if err := os.Remove(filepath.Join(dir, "a")); err != nil {
			t.Fatal(err)
		}
		waitFor(ev{"a", remove})

		t.Run("overflow keeps the newest", func(t *testing.T) {
			for i := range 300 {
				mustWrite(t, filepath.Join(dir, fmt.Sprintf("f%03d", i)), "")
			}
			mustWrite(t, filepath.Join(dir, "last"), "")
			time.Sleep(300 * time.Millisecond)
			var got []ev
			for range 5 {
				got = append(got, poll()...)
				time.Sleep(50 * time.Millisecond)
			}
			if len(got) > 100 {
				t.Errorf("got %d events, want at most the buffer's 100", len(got))
			}
			if len(got) == 0 || got[len(got)-1] != (ev{"last", create}) {
				t.Errorf("newest event missing; last of %d is %v", len(got), got[len(got)-1:])
			}
		})

		if _, err := c.RemoveWatcher(ctx, req(&fspb.RemoveWatcherRequest{WatcherId: id}, "")); err != nil {
			t.Fatal(err)
		}
		for _, call := range []struct {
			name string
			code connect.Code
			err  func() error
		}{
			{"get after remove", connect.CodeNotFound, func() error {
				_, err := c.GetWatcherEvents(ctx, req(&fspb.GetWatcherEventsRequest{WatcherId: id}, ""))
				return err
			}},
			{"remove twice", connect.CodeNotFound, func() error {
				_, err := c.RemoveWatcher(ctx, req(&fspb.RemoveWatcherRequest{WatcherId: id}, ""))
				return err
			}},
			{"unknown id", connect.CodeNotFound, func() error {
				_, err := c.GetWatcherEvents(ctx, req(&fspb.GetWatcherEventsRequest{WatcherId: "nope"}, ""))
				return err
			}},
			{"create on a missing path", connect.CodeNotFound, func() error {
				_, err := c.CreateWatcher(ctx, req(&fspb.CreateWatcherRequest{Path: filepath.Join(dir, "missing")}, ""))
				return err
			}},
			{"create on a file", connect.CodeInvalidArgument, func() error {
				_, err := c.CreateWatcher(ctx, req(&fspb.CreateWatcherRequest{Path: filepath.Join(dir, "sub", "b")}, ""))
				return err
			}},
		} {
			t.Run(call.name, func(t *testing.T) {
				if err := call.err(); codeOf(err) != call.code {
					t.Errorf("code = %v, want %v (err %v)", codeOf(err), call.code, err)
				}
			})
		}
	})
}

func TestPollingWatcherDirectoryRemoved(t *testing.T) {
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		ctx := context.Background()
		dir := filepath.Join(t.TempDir(), "w")
		mustMkdir(t, dir)
		cr, err := c.CreateWatcher(ctx, req(&fspb.CreateWatcherRequest{Path: dir}, ""))
		if err != nil {
			t.Fatal(err)
		}
		id := cr.Msg.GetWatcherId()
		mustWrite(t, filepath.Join(dir, "f"), "")
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		// The buffered events come out first, then not_found for good.
		var got []ev
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			res, err := c.GetWatcherEvents(ctx, req(&fspb.GetWatcherEventsRequest{WatcherId: id}, ""))
			if codeOf(err) == connect.CodeNotFound {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range res.Msg.GetEvents() {
				got = append(got, ev{e.GetName(), e.GetType()})
			}
			if time.Now().After(deadline) {
				t.Fatalf("watcher still alive after its directory was removed; events %v", got)
			}
		}
		if !containsInOrder(got, []ev{{"f", create}, {"f", remove}}) {
			t.Errorf("events = %v, want CREATE f … REMOVE f", got)
		}
	})
}

func TestPollingWatcherLimit(t *testing.T) {
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		ctx := context.Background()
		dir := t.TempDir()
		var ids []string
		defer func() {
			for _, id := range ids {
				c.RemoveWatcher(ctx, req(&fspb.RemoveWatcherRequest{WatcherId: id}, ""))
			}
		}()
		for range filesystem.MaxWatchers {
			cr, err := c.CreateWatcher(ctx, req(&fspb.CreateWatcherRequest{Path: dir}, ""))
			if err != nil {
				t.Fatalf("watcher %d: %v", len(ids)+1, err)
			}
			ids = append(ids, cr.Msg.GetWatcherId())
		}
		_, err := c.CreateWatcher(ctx, req(&fspb.CreateWatcherRequest{Path: dir}, ""))
		if got := codeOf(err); got != connect.CodeResourceExhausted {
			t.Fatalf("watcher past the limit: code %v (%v), want resource_exhausted", got, err)
		}
		// Removing one makes room again.
		if _, err := c.RemoveWatcher(ctx, req(&fspb.RemoveWatcherRequest{WatcherId: ids[0]}, "")); err != nil {
			t.Fatal(err)
		}
		ids = ids[1:]
		cr, err := c.CreateWatcher(ctx, req(&fspb.CreateWatcherRequest{Path: dir}, ""))
		if err != nil {
			t.Fatalf("watcher after a removal: %v", err)
		}
		ids = append(ids, cr.Msg.GetWatcherId())
	})
}
