package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fsnotify/fsnotify"

	"github.com/lightbearco/tupper/agent/asuser"
	"github.com/lightbearco/tupper/agent/filesystem/userfs"
	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// watchOptions are the fields WatchDirRequest and CreateWatcherRequest share.
type watchOptions struct {
	user         *identity.User // the watch sees what this user sees
	path         string         // absolute, as the client named it
	recursive    bool
	includeEntry bool
	allowNetwork bool
}

// dirWatcher turns inotify events under one directory into envd
// FilesystemEvents. inotify watches single directories, so a recursive
// watcher adds a watch per subdirectory, including ones created while it
// runs. It is used by one goroutine at a time.
//
// A watcher acts as its user (opts.user): it starts and runs with the user's
// credentials (see startWatch and run), so it watches, and describes with
// includeEntry, only directories the user may read, whatever links lead
// there.
type dirWatcher struct {
	opts watchOptions
	root string // the watched directory with links resolved: inotify reports real paths
	fsw  *fsnotify.Watcher
	log  *slog.Logger

	// dirs holds the directories this watcher added watches for, so that a
	// removed or renamed name can be checked for being one cheaply (renames
	// are frequent: editors and git write files by renaming them).
	dirs map[string]struct{}

	// gone holds names reported removed or renamed away and not created
	// again since. inotify reports a watched subdirectory's removal or
	// rename twice (from its parent and from the directory itself); a name
	// cannot go twice without coming back, so the repeat is dropped.
	gone map[string]struct{}

	// landing holds directories where an upload's temporary file was just
	// renamed away: the next file created there is that upload landing.
	landing map[string]struct{}
}

// maxGone bounds dirWatcher.gone; past it the set starts over, at worst
// letting one duplicate through.
const maxGone = 4096

// watchEventBuffer is how many events fsnotify holds for a slow consumer
// before the kernel's own queue (fs.inotify.max_queued_events) takes over.
const watchEventBuffer = 1024

// startWatch checks that opts.path is a directory and starts watching it.
// Events that happen once it returns are reported by run. A missing path is
// errdefs.ErrNotFound, a non-directory errdefs.ErrInvalidArgument, and a
// network mount without allowNetwork errdefs.ErrFailedPrecondition, since
// inotify does not see changes made by other machines.
func startWatch(opts watchOptions, log *slog.Logger) (d *dirWatcher, err error) {
	err = asuser.Do(opts.user, func() (err error) {
		d, err = startWatchAs(opts, log)
		return err
	})
	return d, err
}

// startWatchAs is startWatch with the calling thread's credentials.
func startWatchAs(opts watchOptions, log *slog.Logger) (*dirWatcher, error) {
	st, err := os.Stat(opts.path)
	if err != nil {
		return nil, userfs.Classify(err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("watch %s: not a directory: %w", opts.path, errdefs.ErrInvalidArgument)
	}
	root, err := filepath.EvalSymlinks(opts.path)
	if err != nil {
		return nil, userfs.Classify(err)
	}
	if !opts.allowNetwork {
		network, err := isNetworkMount(root)
		if err != nil {
			return nil, userfs.Classify(err)
		}
		if network {
			return nil, fmt.Errorf("watch %s: on a network filesystem, whose remote changes go unseen; set allowNetworkMounts to watch anyway: %w",
				opts.path, errdefs.ErrFailedPrecondition)
		}
	}
	fsw, err := fsnotify.NewBufferedWatcher(watchEventBuffer)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", opts.path, classifyWatchErr(err))
	}
	d := &dirWatcher{
		opts:    opts,
		root:    root,
		fsw:     fsw,
		log:     log.With("op", "watch", "path", opts.path),
		dirs:    make(map[string]struct{}),
		gone:    make(map[string]struct{}),
		landing: make(map[string]struct{}),
	}
	if err := d.add(root); err != nil {
		fsw.Close()
		return nil, err
	}
	if opts.recursive {
		if err := d.addTree(root, nil); err != nil {
			fsw.Close()
			return nil, err
		}
	}
	return d, nil
}

// close stops the watcher and frees its inotify instance.
func (d *dirWatcher) close() { d.fsw.Close() }

// run reports events through emit until ctx ends (returning nil), emit
// fails (returning its error), or the watched directory itself is removed
// or moved away (returning errdefs.ErrNotFound, since nothing more can
// happen under it). It runs with the watcher's user's credentials, emit
// included.
func (d *dirWatcher) run(ctx context.Context, emit func(*fspb.FilesystemEvent) error) error {
	return asuser.Do(d.opts.user, func() error { return d.runAs(ctx, emit) })
}

// runAs is run with the calling thread's credentials.
func (d *dirWatcher) runAs(ctx context.Context, emit func(*fspb.FilesystemEvent) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-d.fsw.Events:
			if !ok {
				return nil
			}
			if ev.Name == d.root && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
				return fmt.Errorf("watched directory %s was removed or moved: %w", d.opts.path, errdefs.ErrNotFound)
			}
			if err := d.handle(ev, emit); err != nil {
				return err
			}
		case err, ok := <-d.fsw.Errors:
			if !ok {
				return nil
			}
			// Overflow means the kernel dropped events: clients miss some
			// (and a recursive watch may miss a new directory's watch), but
			// the watch is otherwise good, so it goes on.
			d.log.Warn("watch error", "err", err)
		}
	}
}

// eventTypes maps fsnotify operations to envd event types, in the order they
// are reported when one inotify event carries several: creation first,
// because a client reacting to the others needs to know the name exists.
var eventTypes = []struct {
	op  fsnotify.Op
	typ fspb.EventType
}{
	{fsnotify.Create, fspb.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Write, fspb.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, fspb.EventType_EVENT_TYPE_REMOVE},
	{fsnotify.Rename, fspb.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, fspb.EventType_EVENT_TYPE_CHMOD},
}

func (d *dirWatcher) handle(ev fsnotify.Event, emit func(*fspb.FilesystemEvent) error) error {
	// Uploads write to a temporary file and rename it into place; clients
	// see the finished file appear, not the temporary one.
	if userfs.IsTempName(filepath.Base(ev.Name)) {
		if ev.Has(fsnotify.Rename) {
			if len(d.landing) >= maxGone {
				clear(d.landing)
			}
			d.landing[filepath.Dir(ev.Name)] = struct{}{}
		}
		return nil
	}
	for _, t := range eventTypes {
		if !ev.Has(t.op) {
			continue
		}
		if err := d.emit(ev.Name, t.typ, emit); err != nil {
			return err
		}
	}
	// An upload lands by a rename, which inotify reports as a create only.
	// Clients of envd, which writes in place, wait for a write after
	// files.write, so report one: the file's content did change.
	if _, ok := d.landing[filepath.Dir(ev.Name)]; ok && ev.Has(fsnotify.Create) {
		delete(d.landing, filepath.Dir(ev.Name))
		if err := d.emit(ev.Name, fspb.EventType_EVENT_TYPE_WRITE, emit); err != nil {
			return err
		}
	}
	if !d.opts.recursive {
		return nil
	}
	if ev.Has(fsnotify.Rename) || ev.Has(fsnotify.Remove) {
		// A directory moved away keeps its subdirectories' watches under
		// the old names; drop them. If it moved within the tree, the Create
		// for its new name watches it afresh.
		d.forget(ev.Name)
	}
	if ev.Has(fsnotify.Create) {
		if st, err := os.Lstat(ev.Name); err == nil && st.IsDir() {
			return d.addTree(ev.Name, emit)
		}
	}
	return nil
}

func (d *dirWatcher) emit(path string, typ fspb.EventType, emit func(*fspb.FilesystemEvent) error) error {
	name, err := filepath.Rel(d.root, path)
	if err != nil || name == "." || name == ".." || strings.HasPrefix(name, "../") {
		return nil
	}
	goes := typ == fspb.EventType_EVENT_TYPE_RENAME || typ == fspb.EventType_EVENT_TYPE_REMOVE
	switch _, seen := d.gone[name]; {
	case goes && seen:
		return nil
	case goes:
		if len(d.gone) >= maxGone {
			clear(d.gone)
		}
		d.gone[name] = struct{}{}
	case typ == fspb.EventType_EVENT_TYPE_CREATE:
		delete(d.gone, name)
	}
	e := &fspb.FilesystemEvent{Name: name, Type: typ}
	if d.opts.includeEntry && !goes {
		if entry, err := statEntry(path); err == nil {
			entry.Path = filepath.Join(d.opts.path, name)
			e.Entry = entry
		}
	}
	return emit(e)
}

// addTree watches dir and every directory below it. With emit set, dir is
// new: entries already inside it were made before its watch existed (mkdir -p
// a/b/c, or a file written right after its directory), so each is reported
// as created. An entry made in the instant between adding the watch and
// reading the directory may then be reported twice; a missed one would be
// worse.
func (d *dirWatcher) addTree(dir string, emit func(*fspb.FilesystemEvent) error) error {
	return filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			// Gone or unreadable meanwhile: nothing there to watch.
			return nil
		}
		if p != dir && emit != nil && !userfs.IsTempName(de.Name()) {
			if err := d.emit(p, fspb.EventType_EVENT_TYPE_CREATE, emit); err != nil {
				return err
			}
		}
		if !de.IsDir() {
			return nil
		}
		if err := d.add(p); err != nil {
			// Gone meanwhile, or a subdirectory the user may not read
			// (inotify needs read permission): nothing to watch there,
			// as ls -R shows nothing there.
			if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrPermissionDenied) {
				return filepath.SkipDir
			}
			return err
		}
		return nil
	})
}

// add watches dir. Linux's inotify_add_watch requires read permission on
// the directory and gVisor's does not, so add opens it first: a user gets
// permission_denied for a directory it may not list on both. (Code of that
// user inside gVisor could still watch it directly; this keeps the agent's
// answer the same everywhere, it is not what keeps the user out.)
func (d *dirWatcher) add(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, userfs.Classify(err))
	}
	f.Close()
	if err := d.fsw.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, classifyWatchErr(err))
	}
	d.dirs[dir] = struct{}{}
	return nil
}

// forget drops the watches of dir and everything below it, if dir is a
// watched directory. Watches the kernel already dropped (the directory was
// deleted) are only forgotten here.
func (d *dirWatcher) forget(dir string) {
	if _, ok := d.dirs[dir]; !ok {
		return
	}
	prefix := dir + string(filepath.Separator)
	for w := range d.dirs {
		if w == dir || strings.HasPrefix(w, prefix) {
			d.fsw.Remove(w)
			delete(d.dirs, w)
		}
	}
}

// classifyWatchErr explains the one inotify failure users hit: too many
// watches or instances, which shows as ENOSPC or EMFILE and is not a full
// disk.
func classifyWatchErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EMFILE) {
		return fmt.Errorf("%w (inotify limit reached: raise fs.inotify.max_user_watches or max_user_instances): %w", err, errdefs.ErrResourceExhausted)
	}
	return userfs.Classify(err)
}
