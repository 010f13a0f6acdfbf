package gvisor

import (
	"fmt"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
)

// Options understood in backend.Config.Options:
//
//	runsc     path of the runsc binary (Config.RunscPath)
//	platform  systrap, ptrace or kvm (Config.Platform)
//	debug     a boolean (Config.Debug)
//
// Any other key is an error, so that a typo does not go unnoticed.
var optionKeys = []string{"debug", "platform", "runsc"}

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
	cfg.Debug, err = backend.BoolOption("gvisor", c.Options, "debug")
	return cfg, err
}
