package firecracker

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

// Options understood in backend.Config.Options:
//
//	firecracker  path of the firecracker binary (Config.FirecrackerPath)
//	jailer       path of the jailer binary (Config.JailerPath)
//	no-jailer    a boolean: run Firecracker without the jailer (Config.NoJailer)
//	kernel       the guest kernel's directory (Config.KernelDir)
//	boot-args    added to the guest kernel's command line (Config.BootArgs)
//
// Any other key is an error, so that a typo does not go unnoticed.
var optionKeys = []string{"boot-args", "firecracker", "jailer", "kernel", "no-jailer"}

func init() {
	backend.Register("firecracker", open)
	backend.RegisterCheck("firecracker", check)
}

func open(c backend.Config) (backend.Backend, error) {
	cfg, err := configFrom(c)
	if err != nil {
		return nil, err
	}
	if !c.Network.NoEgress {
		cfg.withDefaults().Logger.Warn("firecracker sandboxes have no network interface: they get no egress whatever their policy says", "backend", "firecracker")
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
			return Config{}, fmt.Errorf("firecracker: unknown option %q (known: %v): %w", k, optionKeys, errdefs.ErrInvalidArgument)
		}
	}
	cfg := Config{
		Root:            c.Root,
		Logger:          c.Logger,
		FirecrackerPath: c.Options["firecracker"],
		JailerPath:      c.Options["jailer"],
		KernelDir:       c.Options["kernel"],
		BootArgs:        c.Options["boot-args"],
	}
	if v, ok := c.Options["no-jailer"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Config{}, fmt.Errorf("firecracker: option no-jailer=%q: %w", v, errdefs.ErrInvalidArgument)
		}
		cfg.NoJailer = b
	}
	return cfg, cfg.Validate()
}
