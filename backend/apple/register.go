package apple

import (
	"fmt"
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
	backend.Register("apple", backend.Opens(configFrom, New))
	backend.RegisterCheck("apple", check)
}

// configFrom maps the registry's generic config onto Config.
func configFrom(c backend.Config) (Config, error) {
	if err := backend.CheckOptions("apple", c.Options, optionKeys); err != nil {
		return Config{}, err
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
