package engine

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// A paused sandbox is a checkpoint on disk (backend.Checkpointer): its
// memory, processes and files, under <root>/paused/<id>, and its record,
// in state "paused". It holds no memory, CPU or network; it stays live
// (listed, killable, its time stopped) until it is resumed or killed, and
// a restart of the daemon, or of the host, keeps it.

// checkpointTimeout bounds a checkpoint, which writes the sandbox's whole
// memory to disk.
const checkpointTimeout = 5 * time.Minute

func (e *Engine) checkpointDir(id string) string { return filepath.Join(e.cfg.Root, "paused", id) }

// removeCheckpoint removes the checkpoint of paused sandbox id, if any.
func (e *Engine) removeCheckpoint(id string) {
	if err := os.RemoveAll(e.checkpointDir(id)); err != nil {
		e.log.Warn("remove checkpoint", "sandbox", id, "err", err)
	}
}

// checkCheckpoint fails unless paused sandbox id has its checkpoint.
func (e *Engine) checkCheckpoint(id string) error {
	_, err := os.Stat(e.checkpointDir(id))
	return err
}

// checkpointer returns be as a backend.Checkpointer, or an
// errdefs.ErrNotSupported error saying what cannot be done on it.
func checkpointer(be backend.Backend, name, what string) (backend.Checkpointer, error) {
	cp, ok := be.(backend.Checkpointer)
	if !ok {
		return nil, fmt.Errorf("%s: the %s backend cannot checkpoint a sandbox (gvisor can): %w", what, name, errdefs.ErrNotSupported)
	}
	return cp, nil
}

// Pause saves sandbox id to disk and frees what it held; Connect (or
// Resume) brings it back with its processes, memory and files as they
// were. keepMemory false saves its files alone (E2B's filesystem-only
// pause): the resume boots it anew on them, as a reboot would. Pausing a
// paused sandbox fails with errdefs.ErrFailedPrecondition.
func (e *Engine) Pause(ctx context.Context, id string, keepMemory bool) error {
	if err := e.checkScope(ctx, id); err != nil {
		return err
	}
	return e.pause(ctx, id, keepMemory)
}

func (e *Engine) pause(ctx context.Context, id string, keepMemory bool) error {
	l, err := e.liveOf(id)
	if err != nil {
		return err
	}
	l.op.Lock()
	defer l.op.Unlock()
	e.mu.Lock()
	if e.live[id] != l {
		e.mu.Unlock()
		return fmt.Errorf("sandbox %q: %w (it was killed)", id, errdefs.ErrNotFound)
	}
	if l.rec.State != store.StateRunning {
		e.mu.Unlock()
		return fmt.Errorf("sandbox %q is %s, not running: %w", id, l.rec.State, errdefs.ErrFailedPrecondition)
	}
	cp, err := checkpointer(l.be, l.beName, "pause")
	if err == nil && !keepMemory {
		_, err = e.filesSaver(l)
	}
	if err != nil {
		e.mu.Unlock()
		return err
	}
	l.suspending = true
	conns := l.conns
	l.conns = &connSet{}
	e.mu.Unlock()
	resetSuspending := func() {
		e.mu.Lock()
		l.suspending = false
		e.mu.Unlock()
	}
	begin := time.Now()
	// Open connections would be reset by the checkpoint: end them now.
	conns.cutAll()
	dir := e.checkpointDir(id)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		resetSuspending()
		return fmt.Errorf("sandbox %q: pause: %w", id, err)
	}
	os.RemoveAll(dir) // what a pause that crashed left
	// Pausing must finish even when the caller gives up: a half-paused
	// sandbox is worse than a slow answer.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	save := func() error { return cp.Checkpoint(cctx, id, dir, false) }
	if !keepMemory {
		save = func() error { return e.saveFiles(cctx, l, id, dir) }
	}
	if err := save(); err != nil {
		resetSuspending()
		if st, serr := l.be.State(cctx, id); serr != nil || st != backend.StateRunning {
			// The backend could not leave it running: it is gone.
			if kerr := e.kill(e.bg, id, fmt.Sprintf("pausing it failed: %v", err)); kerr != nil && !errdefs.IsNotFound(kerr) {
				e.log.Error("clean up sandbox whose pause failed", "sandbox", id, "err", kerr)
			}
		}
		return fmt.Errorf("sandbox %q: pause: %w", id, e.explainDiskFull(err))
	}
	_, err = e.updateRecord(cctx, id, func(sb *Sandbox) error {
		sb.State, sb.PausedAt, sb.MemoryKept = store.StatePaused, time.Now().UTC(), keepMemory
		sb.AgentAddr, sb.Pid = "", 0
		return nil
	}, func(l *liveSandbox) {
		l.suspending = false
		l.timer.Stop()
	})
	if err != nil {
		// Killed meanwhile: its checkpoint is nobody's.
		resetSuspending()
		e.removeCheckpoint(id)
		return fmt.Errorf("sandbox %q: pause: %w", id, err)
	}
	e.log.Info("sandbox paused", "sandbox", id, "took", time.Since(begin), "bytes", dirSize(dir))
	return nil
}

// Resume boots paused sandbox id from its checkpoint, with its processes,
// memory and files as they were, and returns it running; timeout, when
// positive, is its time to live from now (else the one it was created
// with). A sandbox that runs already is returned as it is.
func (e *Engine) Resume(ctx context.Context, id string, timeout time.Duration) (*Sandbox, error) {
	return e.ResumeWith(ctx, id, timeout, false)
}

// ResumeWith is Resume; with reboot the sandbox boots anew on its files,
// its processes and memory dropped (E2B's connect with onResume
// "reboot"), whatever its pause kept.
func (e *Engine) ResumeWith(ctx context.Context, id string, timeout time.Duration, reboot bool) (*Sandbox, error) {
	if err := e.checkScope(ctx, id); err != nil {
		return nil, err
	}
	if timeout < 0 || timeout > e.cfg.MaxTimeout {
		return nil, fmt.Errorf("sandbox %q: timeout %v must be at most %v: %w", id, timeout, e.cfg.MaxTimeout, errdefs.ErrInvalidArgument)
	}
	return e.resume(ctx, id, timeout, reboot)
}

func (e *Engine) resume(ctx context.Context, id string, timeout time.Duration, reboot bool) (*Sandbox, error) {
	l, err := e.liveOf(id)
	if err != nil {
		return nil, err
	}
	l.op.Lock()
	defer l.op.Unlock()
	e.mu.Lock()
	if e.live[id] != l {
		e.mu.Unlock()
		return nil, fmt.Errorf("sandbox %q: %w (it was killed)", id, errdefs.ErrNotFound)
	}
	rec := l.rec.Clone()
	e.mu.Unlock()
	if rec.State != store.StatePaused {
		return rec, nil // resumed meanwhile
	}
	cp, err := checkpointer(l.be, l.beName, "resume")
	if err != nil {
		return nil, err
	}
	done, err := e.admit(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	begin := time.Now()
	var started *backend.Sandbox
	rebooted := !rec.MemoryKept || reboot
	if !rebooted {
		started, err = e.restore(ctx, l.be, cp, rec, e.checkpointDir(id), rec.AccessToken)
	} else {
		started, err = e.reboot(ctx, l, rec)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: resume: %w", id, err)
	}
	if timeout == 0 {
		timeout = cmp.Or(rec.Timeout, e.cfg.DefaultTimeout)
	}
	sb, err := e.updateRecord(context.WithoutCancel(ctx), id, func(sb *Sandbox) error {
		sb.State, sb.AgentAddr, sb.Pid, sb.ImageID = store.StateRunning, started.AgentAddr, started.Pid, rec.ImageID
		sb.Rebooted = sb.Rebooted || rebooted
		sb.EndAt = time.Now().UTC().Add(timeout)
		return nil
	}, func(l *liveSandbox) {
		l.endAt = l.rec.EndAt
		l.timer.Reset(time.Until(l.endAt))
		l.conns = &connSet{}
		e.watchLocked(id, l)
	})
	if err != nil {
		// Killed while it booted: the kill found nothing to stop yet.
		e.cleanup(context.WithoutCancel(ctx), l.be, id)
		return nil, fmt.Errorf("sandbox %q: resume: %w", id, err)
	}
	// The running sandbox is the truth now; its next pause saves anew.
	e.removeCheckpoint(id)
	e.log.Info("sandbox resumed", "sandbox", id, "took", time.Since(begin))
	return sb, nil
}

// restore boots sb (its ID, image, limits, network policy and access
// token as they are to be) on be from the checkpoint in dir, waits for
// its agent, and tells the agent what changed: its network and, when
// token is not sb's, its access token (token is the one the saved agent
// answers to). It returns what the backend started; on failure it leaves
// nothing running.
func (e *Engine) restore(ctx context.Context, be backend.Backend, cp backend.Checkpointer, sb *Sandbox, dir, token string) (*backend.Sandbox, error) {
	img, err := e.cfg.Images.Resolve(ctx, sb.ImageID)
	if err != nil {
		return nil, fmt.Errorf("its image: %w", err)
	}
	bootCtx, cancel := context.WithTimeout(e.bg, e.cfg.BootTimeout)
	defer cancel()
	started, err := cp.Restore(bootCtx, e.specFor(sb, img), dir)
	if err != nil {
		return nil, e.explainDiskFull(err)
	}
	booted := *sb
	booted.AgentAddr, booted.Pid = started.AgentAddr, started.Pid
	err = e.waitAgent(bootCtx, be, &booted)
	if err == nil {
		err = e.reinit(bootCtx, be, &booted, started.Nameserver, token)
	}
	if err != nil {
		e.cleanup(context.WithoutCancel(ctx), be, sb.ID)
		return nil, err
	}
	return started, nil
}

// reinit tells the agent of restored sandbox sb its network (nameserver,
// and its own address) and its access token, through the agent's /init,
// which answers to token, the token it was saved with.
func (e *Engine) reinit(ctx context.Context, be backend.Backend, sb *Sandbox, nameserver, token string) error {
	return e.initAgent(ctx, be, sb, nameserver, token, nil)
}

// initAgent is reinit that also adds env to the environment of the
// sandbox's commands to come.
func (e *Engine) initAgent(ctx context.Context, be backend.Backend, sb *Sandbox, nameserver, token string, env map[string]string) error {
	body := map[string]any{}
	if len(env) > 0 {
		body["envVars"] = env
	}
	if sb.AccessToken != token {
		body["accessToken"] = sb.AccessToken
	}
	if host, _, err := net.SplitHostPort(sb.AgentAddr); err == nil && nameserver != "" {
		body["nameserver"], body["sandboxAddr"] = nameserver, host
	}
	if len(body) == 0 {
		return nil
	}
	data, _ := json.Marshal(body)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialBackend(ctx, be, sb.ID, sb.AgentAddr, backend.AgentPort)
		},
	}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+SandboxAddr(sb.ID, backend.AgentPort)+"/init", bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Access-Token", token)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("tell the restored agent its network: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("tell the restored agent its network: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// dirSize is what the files under dir take, in bytes (0 when unknown).
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// errPaused is the answer to a request that reaches a paused sandbox
// without autoResume.
func errPaused(id string) error {
	return fmt.Errorf("sandbox %q is paused: resume it with connect (Sandbox.connect), or create it with autoResume: %w", id, errdefs.ErrFailedPrecondition)
}
