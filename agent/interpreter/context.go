package interpreter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// codeContext is one context: a language, a working directory and the
// kernel that holds its state. Cells run one at a time, in the order they
// come. A restart, or a kernel that died, replaces the kernel; the new one
// starts in the background.
type codeContext struct {
	id, lang, cwd string
	srv           *Server

	execMu sync.Mutex // held while a cell runs

	mu      sync.Mutex
	k       kernel
	pending *kernelStart // the kernel being started, if any
	gen     int          // counts the kernels replaced
	closed  bool
}

// kernelStart is one start of a kernel; done closes when it has ended.
type kernelStart struct {
	done chan struct{}
	k    kernel
	err  error
}

// errReplaced: the kernel that was starting, or running the cell, was
// replaced by a restart.
var errReplaced = errors.New("the context was restarted")

func (c *codeContext) json() contextJSON {
	return contextJSON{ID: c.id, Language: c.lang, Cwd: c.cwd}
}

// warm starts the kernel in the background if it is not running.
func (c *codeContext) warm() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		if _, _, err := c.kernel(ctx); err != nil && !errors.Is(err, errReplaced) && !errors.Is(err, errClosed) && !c.isClosed() {
			c.srv.cfg.Logger.Warn("code context did not start", "context", c.id, "language", c.lang, "err", err)
		}
	}()
}

// kernel returns the context's running kernel and its generation,
// starting one if there is none and waiting until it is ready.
func (c *codeContext) kernel(ctx context.Context) (kernel, int, error) {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return nil, 0, errClosed
	case c.k != nil:
		k, gen := c.k, c.gen
		c.mu.Unlock()
		return k, gen, nil
	}
	p := c.pending
	if p == nil {
		p = &kernelStart{done: make(chan struct{})}
		c.pending = p
		gen := c.gen
		go func() {
			// Not the caller's context: a kernel that starts is kept for
			// the next caller even if this one went away.
			sctx, cancel := context.WithTimeout(context.Background(), startTimeout)
			k, err := c.srv.startKernel(sctx, c.lang, c.cwd)
			cancel()
			c.mu.Lock()
			switch {
			case err != nil:
			case c.closed:
				k.close()
				k, err = nil, errClosed
			case c.gen != gen:
				k.close()
				k, err = nil, errReplaced
			default:
				c.k = k
			}
			if c.pending == p {
				c.pending = nil
			}
			p.k, p.err = k, err
			close(p.done)
			c.mu.Unlock()
		}()
	}
	c.mu.Unlock()
	select {
	case <-p.done:
		if p.err != nil {
			return nil, 0, p.err
		}
		return c.kernel(ctx)
	case <-ctx.Done():
		return nil, 0, context.Cause(ctx)
	}
}

// run runs one cell, reporting to out what became of it.
func (c *codeContext) run(ctx context.Context, code string, env map[string]string, out sink) {
	c.execMu.Lock()
	defer c.execMu.Unlock()
	if ctx.Err() != nil {
		// The client gave up while the cell waited behind another: it
		// saw a timeout, and may send the cell again.
		return
	}
	k, gen, err := c.kernel(ctx)
	if errors.Is(err, errReplaced) {
		k, gen, err = c.kernel(ctx)
	}
	if err != nil {
		out.fail("KernelError", "the "+c.lang+" kernel is not available: "+err.Error(), "")
		return
	}
	err = k.execute(ctx, code, env, out)
	if err == nil {
		return
	}
	c.mu.Lock()
	restarted := c.gen != gen
	c.mu.Unlock()
	switch {
	case restarted:
		out.fail("ContextRestarting", "the context was restarted while the cell ran", "")
	case errors.Is(err, errUnresponsive):
		c.replace(k, gen)
		out.fail("TimeoutError", "the cell did not stop when interrupted, so its kernel was restarted: the context's state is lost", "")
	case errors.Is(err, errKernelGone):
		c.replace(k, gen)
		out.fail("KernelDied", "the kernel's process ended while the cell ran (out of memory, or the code ended it): the context's state is lost and a new kernel is starting", "")
	default:
		out.fail("InterpreterError", err.Error(), "")
	}
}

// replace drops kernel k of generation gen, if it is still the context's,
// and starts another in the background.
func (c *codeContext) replace(k kernel, gen int) {
	c.mu.Lock()
	if c.gen == gen && c.k == k {
		c.k = nil
		c.gen++
	}
	closed := c.closed
	c.mu.Unlock()
	k.close()
	if !closed {
		c.warm()
	}
}

// restart replaces the kernel: a running cell ends with ContextRestarting.
// It returns when the new kernel is ready. A kernel still starting is
// already fresh, so a restart then waits for it rather than starting
// another: a storm of restarts keeps one kernel per context.
func (c *codeContext) restart(ctx context.Context) error {
	c.mu.Lock()
	old := c.k
	if old != nil {
		c.k = nil
		c.gen++
	}
	c.mu.Unlock()
	if old != nil {
		old.close()
	}
	_, _, err := c.kernel(ctx)
	return err
}

func (c *codeContext) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// close ends the context's kernel for good.
func (c *codeContext) close() {
	c.mu.Lock()
	c.closed = true
	k := c.k
	c.k = nil
	c.mu.Unlock()
	if k != nil {
		k.close()
	}
}

// startKernel starts a kernel for lang in dir.
func (s *Server) startKernel(ctx context.Context, lang, dir string) (kernel, error) {
	spec := kernelSpec{lang: lang, dir: dir, env: s.cfg.Env, log: s.cfg.Logger}
	scripts, err := s.writeScripts()
	if err != nil {
		return nil, err
	}
	switch lang {
	case Python:
		spec.argv = []string{s.cfg.Python, filepath.Join(scripts, "python_bridge.py"), dir, filepath.Join(scripts, "python_setup.py")}
		return startProcKernel(ctx, spec, func(k *procKernel) error {
			return k.writeCommand(map[string]any{"op": "interrupt"})
		})
	case JavaScript, TypeScript:
		spec.argv = []string{s.cfg.Node, filepath.Join(scripts, "node_driver.js"), lang}
		spec.rawOutput = true
		return startProcKernel(ctx, spec, func(k *procKernel) error {
			return k.cmd.Process.Signal(syscall.SIGINT)
		})
	case Bash:
		spec.argv = []string{s.cfg.Bash, "--noprofile", "--norc"}
		return startBash(spec)
	}
	return nil, errors.New("no kernel for " + lang)
}

// writeScripts writes the kernels' programs into a private directory and
// returns it. It writes them before every kernel start: a cell may have
// emptied /tmp.
func (s *Server) writeScripts() (string, error) {
	s.scriptsMu.Lock()
	defer s.scriptsMu.Unlock()
	if s.scripts == "" {
		dir, err := os.MkdirTemp("", "tupper-kernels-")
		if err != nil {
			return "", fmt.Errorf("kernel scripts: %w", err)
		}
		s.scripts = dir
	}
	if err := os.MkdirAll(s.scripts, 0o700); err != nil {
		return "", fmt.Errorf("kernel scripts: %w", err)
	}
	entries, err := fs.ReadDir(kernelScripts, "kernels")
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		b, err := kernelScripts.ReadFile("kernels/" + e.Name())
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(s.scripts, e.Name()), b, 0o600); err != nil {
			return "", fmt.Errorf("kernel scripts: %w", err)
		}
	}
	return s.scripts, nil
}
