package wsl

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

// Options understood in backend.Config.Options:
//
//	wsl    path of wsl.exe (Config.WSLPath)
//	ports  the host ports agents get, "FIRST-LAST" (Config.FirstPort, LastPort)
//
// Any other key is an error, so that a typo does not go unnoticed.
var optionKeys = []string{"ports", "wsl"}

func init() {
	backend.Register("wsl", backend.Opens(configFrom, New))
	backend.RegisterCheck("wsl", check)
}

// configFrom maps the registry's generic config onto Config. A host whose
// sandboxes must have no egress at all cannot use WSL: its distributions
// share the VM's network, which reaches wherever Windows does.
func configFrom(c backend.Config) (Config, error) {
	if c.Network.NoEgress {
		return Config{}, fmt.Errorf("wsl: sandboxes without egress: %w: WSL 2 distributions share the VM's network", errdefs.ErrNotSupported)
	}
	if err := backend.CheckOptions("wsl", c.Options, optionKeys); err != nil {
		return Config{}, err
	}
	cfg := Config{Root: c.Root, Logger: c.Logger, WSLPath: c.Options["wsl"]}
	if v, ok := c.Options["ports"]; ok {
		first, last, ok := strings.Cut(v, "-")
		f, ferr := strconv.Atoi(first)
		l, lerr := strconv.Atoi(last)
		if !ok || ferr != nil || lerr != nil {
			return Config{}, fmt.Errorf("wsl: option ports=%q: want FIRST-LAST: %w", v, errdefs.ErrInvalidArgument)
		}
		cfg.FirstPort, cfg.LastPort = f, l
	}
	return cfg, cfg.Validate()
}
