package apple

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

// Options understood in backend.Config.Options:
//
//	container  the `container` CLI: a path, or a name on $PATH (Config.CLI)
//	agent      a static linux agent for the containers' architecture,
//	           used in place of the one Tupper finds (Config.AgentPath)
//	arch       the containers' architecture, arm64 or amd64 (Config.Arch)
//	cpus, memory-mb, pids
//	           the defaults for sandboxes that ask for none
//
// Any other key is an error, so that a typo does not go unnoticed.
var optionKeys = []string{"agent", "arch", "container", "cpus", "memory-mb", "pids"}

func init() {
	backend.Register("apple", open)
	backend.RegisterCheck("apple", check)
}

func open(c backend.Config) (backend.Backend, error) {
	cfg, err := configFrom(c)
	if err != nil {
		return nil, err
	}
	b, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// configFrom maps the registry's generic config onto Config.
func configFrom(c backend.Config) (Config, error) {
	for k := range c.Options {
		if !slices.Contains(optionKeys, k) {
			return Config{}, fmt.Errorf("apple: unknown option %q (known: %v): %w", k, optionKeys, errdefs.ErrInvalidArgument)
		}
	}
	if c.Network.NoEgress {
		return Config{}, fmt.Errorf("apple: egress cannot be turned off: Apple's containers reach whatever the Mac reaches through vmnet's NAT, and the backend cannot seal them: %w", errdefs.ErrNotSupported)
	}
	cfg := Config{
		Root:      c.Root,
		Logger:    c.Logger,
		CLI:       c.Options["container"],
		AgentPath: c.Options["agent"],
		Arch:      c.Options["arch"],
	}
	if v, ok := c.Options["cpus"]; ok {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n <= 0 {
			return Config{}, fmt.Errorf("apple: option cpus=%q: want a positive number: %w", v, errdefs.ErrInvalidArgument)
		}
		cfg.DefaultCPUs = n
	}
	for _, o := range []struct {
		key   string
		scale int64
		dst   *int64
	}{{"memory-mb", 1 << 20, &cfg.DefaultMemoryBytes}, {"pids", 1, &cfg.DefaultPids}} {
		v, ok := c.Options[o.key]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return Config{}, fmt.Errorf("apple: option %s=%q: want a positive whole number: %w", o.key, v, errdefs.ErrInvalidArgument)
		}
		*o.dst = n * o.scale
	}
	return cfg, nil
}
