package gvisor

import (
	"fmt"
	"math"
	"strconv"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
)

// Options understood in backend.Config.Options:
//
//	runsc     path of the runsc binary (Config.RunscPath)
//	platform  systrap, ptrace or kvm (Config.Platform)
//	debug           a boolean (Config.Debug)
//	reserve-memory  bytes the host keeps from sandboxes (Config.ReserveMemory)
//	reserve-tasks   host tasks the host keeps (Config.ReserveTasks)
//	overcommit      how far the sandboxes' limits may add up past what the
//	                host spares them, a ratio (Config.Overcommit)
//
// Any other key is an error, so that a typo does not go unnoticed.
var optionKeys = []string{"debug", "overcommit", "platform", "reserve-memory", "reserve-tasks", "runsc"}

func init() {
	backend.Register("gvisor", backend.Opens(configFrom, New))
	backend.RegisterCheck("gvisor", check)
}

// configFrom maps the registry's generic config onto Config.
func configFrom(c backend.Config) (Config, error) {
	cfg := Config{
		Root:      c.Root,
		Logger:    c.Logger,
		RunscPath: c.Options["runsc"],
		Platform:  c.Options["platform"],
	}
	egress, ipv6, err := oci.Egress(c)
	if err != nil {
		return Config{}, fmt.Errorf("gvisor: %w", err)
	}
	cfg.Egress, cfg.IPv6 = egress, ipv6
	if err := backend.CheckOptions("gvisor", c.Options, optionKeys); err != nil {
		return Config{}, err
	}
	if cfg.Debug, err = backend.BoolOption("gvisor", c.Options, "debug"); err != nil {
		return Config{}, err
	}
	for key, dst := range map[string]*int64{"reserve-memory": &cfg.ReserveMemory, "reserve-tasks": &cfg.ReserveTasks} {
		if v, ok := c.Options[key]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return Config{}, fmt.Errorf("gvisor: option %s=%q: want a whole number, 0 or more: %w", key, v, errdefs.ErrInvalidArgument)
			}
			*dst = n
		}
	}
	if v, ok := c.Options["overcommit"]; ok {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 1 || math.IsInf(r, 0) {
			return Config{}, fmt.Errorf("gvisor: option overcommit=%q: want a ratio of 1 or more: %w", v, errdefs.ErrInvalidArgument)
		}
		cfg.Overcommit = r
	}
	return cfg, nil
}
