package runc

import (
	"fmt"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
)

// Options understood in backend.Config.Options:
//
//	runc   path of the runc binary (Config.RuncPath)
//
// Any other key is an error, so that a typo does not go unnoticed.
var optionKeys = []string{"runc"}

func init() {
	backend.Register("runc", backend.Opens(configFrom, New))
	backend.RegisterCheck("runc", check)
}

// configFrom maps the registry's generic config onto Config.
func configFrom(c backend.Config) (Config, error) {
	if err := backend.CheckOptions("runc", c.Options, optionKeys); err != nil {
		return Config{}, err
	}
	egress, ipv6, err := oci.Egress(c)
	if err != nil {
		return Config{}, fmt.Errorf("runc: %w", err)
	}
	return Config{Root: c.Root, Logger: c.Logger, RuncPath: c.Options["runc"], Egress: egress, IPv6: ipv6}, nil
}
