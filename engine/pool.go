package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// Warm pools: for each template the operator names, a few sandboxes booted
// ahead of demand. A create that a pool can serve takes one of them: the
// sandbox is given the create's environment (the agent's /init), network
// policy, owners, metadata, timeout and lifecycle, and the pool boots
// another in the background. A pool sandbox is handed out once and never
// used before: nothing of one user reaches the next, and its access token,
// made by the engine and seen by no one, becomes its user's.
//
// Pool sandboxes belong to poolTeam, which no API key can have (team names
// start with a letter or digit): no listing or call of a user sees them.
// At a restart they are killed and the pools filled anew.

// poolTeam owns the sandboxes waiting in warm pools.
const poolTeam = "_warm-pool"

// PoolConfig is one warm pool: Size sandboxes of Template kept booted.
type PoolConfig struct {
	Template string
	Size     int
}

// warmPools holds the engine's pools.
type warmPools struct {
	mu    sync.Mutex
	pools []*warmPool
	// wake tells the filler a pool lost a sandbox.
	wake chan struct{}
	// lastTake is when a sandbox was last handed out, and firstTake the
	// first hand-out since a refill last started (zero: none).
	lastTake, firstTake time.Time
}

type warmPool struct {
	cfg PoolConfig
	// idle are the ids of the pool's sandboxes, booted and unused;
	// filling counts the boots under way.
	idle    []string
	filling int
	// memoryMB is what one of its sandboxes may use, once known;
	// interpreter says they serve a code interpreter.
	memoryMB    int
	interpreter bool
}

// poolRetry is how long the filler waits after a failed boot, and how
// often it checks that idle sandboxes still run.
const poolRetry = 5 * time.Second

// startPools kills what pools left from an earlier run and starts the
// filler.
func (e *Engine) startPools(ctx context.Context) error {
	for _, p := range e.cfg.WarmPools {
		if p.Size < 0 || p.Template == "" {
			return fmt.Errorf("engine: warm pool %+v: name a template and a size of 0 or more: %w", p, errdefs.ErrInvalidArgument)
		}
	}
	e.pools = &warmPools{wake: make(chan struct{}, 1)}
	for _, p := range e.cfg.WarmPools {
		if p.Size > 0 {
			e.pools.pools = append(e.pools.pools, &warmPool{cfg: p})
		}
	}
	recs, _, err := e.store.List(ctx, store.Query{Team: poolTeam, States: []string{store.StateRunning, store.StatePaused}})
	if err != nil {
		return err
	}
	for _, sb := range recs {
		if err := e.kill(ctx, sb.ID, "a warm pool's sandbox of an earlier run"); err != nil && !errdefs.IsNotFound(err) {
			e.log.Warn("kill an earlier run's warm pool sandbox", "sandbox", sb.ID, "err", err)
		}
	}
	if len(e.pools.pools) == 0 {
		return nil
	}
	e.wg.Add(1)
	go e.fillPools()
	return nil
}

// fillPools keeps every pool at its size within the memory budget, until
// the engine closes, booting up to poolFillers sandboxes at once (each
// through admission, as a create of the pools' own team: a burst of users'
// creates keeps its share of the turns).
func (e *Engine) fillPools() {
	defer e.wg.Done()
	tick := time.NewTicker(poolRetry)
	defer tick.Stop()
	slots := make(chan struct{}, poolFillers(e.cfg.MaxCreating))
	later := time.NewTimer(time.Hour)
	defer later.Stop()
	for {
		if wait := e.startFills(slots); wait > 0 {
			later.Reset(wait)
		}
		select {
		case <-e.bg.Done():
			return
		case <-e.pools.wake:
		case <-later.C:
		case <-tick.C:
			e.pruneIdle()
		}
	}
}

// refillQuiet is how long after a hand-out the pools wait to refill: boots
// take most of both cores here, and the hand-outs of a burst go faster
// without them. Under steady demand they wait at most refillLatest after
// the first hand-out since the last refill.
const (
	refillQuiet  = 250 * time.Millisecond
	refillLatest = time.Second
)

// pruneIdle drops from the pools the sandboxes that stopped being live
// (their timeout, a crash).
func (e *Engine) pruneIdle() {
	e.pools.mu.Lock()
	defer e.pools.mu.Unlock()
	for _, p := range e.pools.pools {
		p.idle = slices.DeleteFunc(p.idle, func(id string) bool { return !e.isLive(id) })
	}
}

// poolMemoryMB is what the pools' idle and booting sandboxes may use
// together. The caller holds pools.mu.
func (e *Engine) poolMemoryMB() int {
	total := 0
	for _, p := range e.pools.pools {
		total += (len(p.idle) + p.filling) * max(p.memoryMB, e.cfg.DefaultMemoryMB)
	}
	return total
}

// poolFillers is how many pool sandboxes boot at once: half of the turns
// to create, so that users' cold creates find the other half.
func poolFillers(maxCreating int) int { return max(1, maxCreating/2) }

// startFills starts a boot for each free slot while a pool lacks one. It
// returns how long to wait before looking again for a pool that waits
// for a burst to end (0: none does).
func (e *Engine) startFills(slots chan struct{}) time.Duration {
	for e.bg.Err() == nil {
		select {
		case slots <- struct{}{}:
		default:
			return 0
		}
		p, wait := e.claimFill()
		if p == nil {
			<-slots
			return wait
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.fill(p)
			<-slots
			e.wakePools()
		}()
	}
	return 0
}

// claimFill picks the first pool below its size whose next sandbox fits
// the budget, and counts a boot for it. While hand-outs go on (see
// refillQuiet) it claims none and returns how long to wait.
func (e *Engine) claimFill() (*warmPool, time.Duration) {
	e.pools.mu.Lock()
	defer e.pools.mu.Unlock()
	if !e.pools.firstTake.IsZero() {
		quiet := min(refillQuiet-time.Since(e.pools.lastTake), refillLatest-time.Since(e.pools.firstTake))
		if quiet > 0 {
			return nil, quiet
		}
	}
	for _, c := range e.pools.pools {
		mem := max(c.memoryMB, e.cfg.DefaultMemoryMB)
		if len(c.idle)+c.filling >= c.cfg.Size || e.poolMemoryMB()+mem > e.cfg.WarmMemoryMB {
			continue
		}
		c.filling++
		e.pools.firstTake = time.Time{}
		return c, 0
	}
	return nil, 0
}

// fill boots one sandbox for p, whose boot claimFill counted. After a
// failure it waits poolRetry before its slot frees.
func (e *Engine) fill(p *warmPool) {
	ctx := WithScope(e.bg, Scope{Team: poolTeam})
	sb, err := e.Create(ctx, CreateOptions{Template: p.cfg.Template, Timeout: e.cfg.MaxTimeout})
	e.pools.mu.Lock()
	p.filling--
	if err == nil {
		p.idle = append(p.idle, sb.ID)
		p.memoryMB, p.interpreter = sb.MemoryMB, sb.CodeInterpreterPort != 0
	}
	e.pools.mu.Unlock()
	if err != nil && e.bg.Err() == nil {
		e.log.Warn("boot a warm pool's sandbox (tried again later)", "template", p.cfg.Template, "err", err)
		select {
		case <-e.bg.Done():
		case <-time.After(poolRetry):
		}
	}
}

// wakePools tells the filler to look again.
func (e *Engine) wakePools() {
	select {
	case e.pools.wake <- struct{}{}:
	default:
	}
}

// warmable reports whether a pool sandbox of template can serve a create
// with opts: the template's image at the engine's default limits, with no
// volumes of its own, and an environment that the agent's /init carries
// (it bounds its body).
func warmable(opts *CreateOptions) bool {
	envBytes := 0
	for k, v := range opts.Env {
		envBytes += len(k) + len(v) + 8
	}
	return opts.Image == "" && opts.Backend == "" && opts.CPUs == 0 && opts.MemoryMB == 0 && opts.DiskMB == 0 &&
		opts.Pids == 0 && envBytes <= maxWarmEnv && len(opts.VolumeMounts) == 0
}

// maxWarmEnv bounds the environment a warm hand-out carries, well within
// the 64 KiB of the agent's /init.
const maxWarmEnv = 48 << 10

// takeWarm hands a pool sandbox to the create of opts on ctx, when a pool
// serves it and has one; false means: create it cold.
func (e *Engine) takeWarm(ctx context.Context, opts CreateOptions) (*Sandbox, bool) {
	if e.pools == nil || !warmable(&opts) || teamOf(ctx) == poolTeam {
		return nil, false
	}
	template := opts.Template
	if template == "" {
		template = e.cfg.DefaultTemplate
	}
	e.pools.mu.Lock()
	var id string
	for _, p := range e.pools.pools {
		// A code interpreter's kernels keep the environment they started
		// with: a create with its own goes cold there.
		if p.cfg.Template == template && len(p.idle) > 0 && (len(opts.Env) == 0 || !p.interpreter) {
			id, p.idle = p.idle[0], p.idle[1:]
			e.pools.lastTake = time.Now()
			if e.pools.firstTake.IsZero() {
				e.pools.firstTake = e.pools.lastTake
			}
			break
		}
	}
	e.pools.mu.Unlock()
	if id == "" {
		return nil, false
	}
	e.wakePools()
	sb, err := e.adopt(ctx, id, template, opts)
	if err != nil {
		e.log.Warn("hand out a warm sandbox; creating one instead", "sandbox", id, "err", err)
		if kerr := e.kill(e.bg, id, fmt.Sprintf("its hand-out from a warm pool failed: %v", err)); kerr != nil && !errdefs.IsNotFound(kerr) {
			e.log.Error("kill a warm sandbox whose hand-out failed", "sandbox", id, "err", kerr)
		}
		return nil, false
	}
	return sb, true
}

// adopt makes pool sandbox id the create's: a new access token and the
// create's environment (the agent's /init), its network policy, owners,
// metadata, timeout and lifecycle.
func (e *Engine) adopt(ctx context.Context, id, template string, opts CreateOptions) (*Sandbox, error) {
	l, err := e.liveOf(id)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	rec := l.rec.Clone()
	e.mu.Unlock()
	if rec.Team != poolTeam || rec.State != store.StateRunning {
		return nil, fmt.Errorf("sandbox %q is no idle pool sandbox: %w", id, errdefs.ErrFailedPrecondition)
	}
	start := time.Now()
	// The caller may go; the hand-out must finish or be undone.
	ctx2, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	network, internet := opts.Network, opts.AllowInternetAccess
	if network == nil && internet == nil {
		network = e.cfg.DefaultNetwork.Clone()
	} else {
		nu, ok := l.be.(backend.NetworkUpdater)
		if !ok {
			return nil, fmt.Errorf("the %s backend cannot change a sandbox's network: %w", l.beName, errdefs.ErrNotSupported)
		}
		if err := nu.UpdateNetwork(ctx2, id, netpolicy.WithInternet(network, internet)); err != nil {
			return nil, fmt.Errorf("apply the create's network policy: %w", err)
		}
	}
	// The sandbox keeps the access token it booted with: the engine made
	// it, no one has seen it, and a pool sandbox is handed out once. So
	// the agent is told something only when the create brings an
	// environment.
	token := rec.AccessToken
	if err := e.initAgent(ctx2, l.be, rec, "", token, opts.Env); err != nil {
		return nil, err
	}
	inited := time.Since(start)
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = e.cfg.DefaultTimeout
	}
	probe := &Sandbox{}
	owners(ctx, probe)
	team, creator := probe.Team, probe.Creator
	sb, err := e.updateRecord(ctx2, id, func(sb *Sandbox) error {
		now := time.Now().UTC()
		sb.Team, sb.Creator, sb.AccessToken = team, creator, token
		sb.TemplateID, sb.Metadata, sb.Env = template, opts.Metadata, opts.Env
		sb.Network, sb.AllowInternetAccess = network, internet
		sb.Secure, sb.AutoPause, sb.AutoPauseMemory, sb.AutoResume = opts.Secure, opts.AutoPause, opts.AutoPauseMemory, opts.AutoResume
		sb.StartedAt, sb.Timeout, sb.EndAt, sb.Warm = now, timeout, now.Add(timeout), true
		return nil
	}, func(l *liveSandbox) {
		l.endAt = l.rec.EndAt
		l.timer.Reset(time.Until(l.endAt))
	})
	if err != nil {
		return nil, err
	}
	e.log.Info("sandbox created from a warm pool", "sandbox", id, "template", template, "took", time.Since(start), "init", inited)
	return sb, nil
}

// WarmIdle returns how many sandboxes wait in the warm pool of template
// (0 when there is none).
func (e *Engine) WarmIdle(template string) int { return len(e.WarmSandboxes(template)) }

// WarmSandboxes returns the ids of the sandboxes waiting in the warm pool
// of template.
func (e *Engine) WarmSandboxes(template string) []string {
	if e.pools == nil {
		return nil
	}
	e.pools.mu.Lock()
	defer e.pools.mu.Unlock()
	var ids []string
	for _, p := range e.pools.pools {
		if p.cfg.Template == template {
			ids = append(ids, p.idle...)
		}
	}
	return ids
}

// drainPools kills the sandboxes waiting in the pools, once the engine is
// closing (after its background work was cancelled).
func (e *Engine) drainPools() {
	if e.pools == nil {
		return
	}
	e.pools.mu.Lock()
	var ids []string
	for _, p := range e.pools.pools {
		ids = append(ids, p.idle...)
		p.idle = nil
	}
	e.pools.mu.Unlock()
	for _, id := range ids {
		e.mu.Lock()
		l, ok := e.live[id]
		if ok {
			delete(e.live, id)
		}
		e.mu.Unlock()
		if !ok {
			continue
		}
		l.conns.cutAll()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := e.stop(ctx, id, l, "the engine closed; a warm pool's sandbox"); err != nil {
			e.log.Warn("kill a warm pool's sandbox at close", "sandbox", id, "err", err)
		}
		cancel()
	}
}
