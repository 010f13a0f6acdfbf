package gvisor

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
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
	backend.Register("gvisor", open)
	backend.RegisterCheck("gvisor", check)
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
	for k := range c.Options {
		if !slices.Contains(optionKeys, k) {
			return Config{}, fmt.Errorf("gvisor: unknown option %q (known: %v): %w", k, optionKeys, errdefs.ErrInvalidArgument)
		}
	}
	if v, ok := c.Options["debug"]; ok {
		d, err := strconv.ParseBool(v)
		if err != nil {
			return Config{}, fmt.Errorf("gvisor: option debug=%q: %w", v, errdefs.ErrInvalidArgument)
		}
		cfg.Debug = d
	}
	return cfg, nil
}
