package runc

import (
	"fmt"
	"slices"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
)

// Options understood in backend.Config.Options:
//
//	runc   path of the runc binary (Config.RuncPath)
//
// Any other key is an error, so that a typo does not go unnoticed.
var optionKeys = []string{"runc"}

func init() {
	backend.Register("runc", open)
	backend.RegisterCheck("runc", check)
}

func open(c backend.Config) (backend.Backend, error) {
	for k := range c.Options {
		if !slices.Contains(optionKeys, k) {
			return nil, fmt.Errorf("runc: unknown option %q (known: %v): %w", k, optionKeys, errdefs.ErrInvalidArgument)
		}
	}
	egress, ipv6, err := oci.Egress(c)
	if err != nil {
		return nil, fmt.Errorf("runc: %w", err)
	}
	b, err := New(Config{Root: c.Root, Logger: c.Logger, RuncPath: c.Options["runc"], Egress: egress, IPv6: ipv6})
	if err != nil {
		return nil, err
	}
	return b, nil
}
