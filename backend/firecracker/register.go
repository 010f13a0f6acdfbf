package firecracker

import (
	"github.com/lightbearco/tupper/backend"
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
	backend.Register("firecracker", backend.Opens(configFrom, New))
	backend.RegisterCheck("firecracker", check)
}

// configFrom maps the registry's generic config onto Config.
func configFrom(c backend.Config) (Config, error) {
	if err := backend.CheckOptions("firecracker", c.Options, optionKeys); err != nil {
		return Config{}, err
	}
	cfg := Config{
		Root:            c.Root,
		Logger:          c.Logger,
		FirecrackerPath: c.Options["firecracker"],
		JailerPath:      c.Options["jailer"],
		KernelDir:       c.Options["kernel"],
		BootArgs:        c.Options["boot-args"],
	}
	noJailer, err := backend.BoolOption("firecracker", c.Options, "no-jailer")
	if err != nil {
		return Config{}, err
	}
	cfg.NoJailer = noJailer
	if !c.Network.NoEgress {
		cfg.withDefaults().Logger.Warn("firecracker sandboxes have no network interface: they get no egress whatever their policy says", "backend", "firecracker")
	}
	return cfg, cfg.Validate()
}
