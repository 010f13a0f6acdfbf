package engine

import (
	"fmt"
	"runtime"

	"github.com/lightbearco/tupper/errdefs"
)

// A create may ask for no more memory and CPUs than the host has. A cgroup
// limit above the host's memory is no limit: the sandbox's out-of-memory
// killer (which reads the limit as MemTotal, capped at the host's) never
// fires, and a memory bomb in it runs the whole host out of memory, where
// the host's OOM killer picks among every process on it. A CPU quota above
// the host's cores is no quota either.

// validateHostMax fills MaxMemoryMB and MaxCPUs from the host when zero
// and checks them against the defaults.
func (c *Config) validateHostMax() error {
	if c.MaxMemoryMB == 0 {
		c.MaxMemoryMB = maxMemoryMB
		if kb, ok := memTotalKB(); ok {
			c.MaxMemoryMB = int(kb >> 10)
		}
		c.MaxMemoryMB = max(c.MaxMemoryMB, c.DefaultMemoryMB)
	}
	if c.MaxCPUs == 0 {
		c.MaxCPUs = max(float64(runtime.NumCPU()), c.DefaultCPUs)
	}
	switch {
	case c.MaxMemoryMB < 0 || c.MaxCPUs < 0:
		return fmt.Errorf("engine: MaxMemoryMB and MaxCPUs must not be negative: %w", errdefs.ErrInvalidArgument)
	case c.DefaultMemoryMB > c.MaxMemoryMB:
		return fmt.Errorf("engine: default memory %d MB is above the maximum %d MB: %w", c.DefaultMemoryMB, c.MaxMemoryMB, errdefs.ErrInvalidArgument)
	case c.DefaultCPUs > c.MaxCPUs:
		return fmt.Errorf("engine: default %g CPUs is above the maximum %g: %w", c.DefaultCPUs, c.MaxCPUs, errdefs.ErrInvalidArgument)
	}
	return nil
}

// validateHostMax checks the memory and CPUs a create asks for against
// cfg's maxima.
func (o *CreateOptions) validateHostMax(cfg *Config) error {
	switch {
	case o.MemoryMB > cfg.MaxMemoryMB:
		return fmt.Errorf("create: memory %d MB is above this server's maximum of %d MB (the host's memory): ask for less: %w",
			o.MemoryMB, cfg.MaxMemoryMB, errdefs.ErrInvalidArgument)
	case o.CPUs > cfg.MaxCPUs:
		return fmt.Errorf("create: %g CPUs is above this server's maximum of %g (the host's CPUs): ask for fewer: %w",
			o.CPUs, cfg.MaxCPUs, errdefs.ErrInvalidArgument)
	}
	return nil
}
