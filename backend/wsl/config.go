package wsl

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// Defaults for the zero fields of Config.
const (
	// DefaultPrefix starts the name of every distribution the backend
	// makes: a sandbox's distribution is DefaultPrefix + its id.
	DefaultPrefix = "tupper-"
	// DefaultFirstPort and DefaultLastPort bound the host ports handed to
	// agents. They sit below Windows' dynamic range (49152–65535), where
	// Hyper-V reserves blocks that nothing else may bind.
	DefaultFirstPort = 41000
	DefaultLastPort  = 41999
	// DefaultPids caps a sandbox's tasks per user when its spec says
	// nothing.
	DefaultPids = 1024
	// DefaultReadyTimeout bounds the wait for a new sandbox's agent.
	DefaultReadyTimeout = time.Minute
	// WSLEnv names the environment variable that points at wsl.exe.
	WSLEnv = "TUPPER_WSL"
)

// Config configures a Backend.
type Config struct {
	// WSLPath is wsl.exe. Empty means $TUPPER_WSL, then wsl.exe on PATH,
	// then %SystemRoot%\System32\wsl.exe.
	WSLPath string
	// Root is the directory the backend owns for its state. Required and
	// absolute; two backends must never share one.
	Root string
	// Prefix starts the names of the backend's distributions; empty means
	// DefaultPrefix. List reports every distribution that has it, so two
	// backends on one Windows account must not share one either.
	Prefix string
	// FirstPort and LastPort bound the host ports given to agents and
	// code interpreters. Zero means DefaultFirstPort and DefaultLastPort.
	FirstPort, LastPort int
	// DefaultPids replaces a spec's zero Resources.Pids; zero means
	// DefaultPids.
	DefaultPids int64
	// ReadyTimeout bounds how long Start waits for the agent to answer;
	// zero means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Logger receives the backend's logs; nil means slog.Default().
	Logger *slog.Logger
}

// prefixPattern is what a distribution name may hold, less the id.
var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,20}$`)

// Validate reports whether c can make a Backend; zero optional fields are
// fine. Its errors are of class errdefs.ErrInvalidArgument. It does not look
// for wsl.exe; New does.
func (c *Config) Validate() error {
	var errs []error
	if c.Root == "" || !filepath.IsAbs(c.Root) {
		errs = append(errs, fmt.Errorf("Root %q must be an absolute path", c.Root))
	}
	if c.WSLPath != "" && !filepath.IsAbs(c.WSLPath) {
		errs = append(errs, fmt.Errorf("WSLPath %q must be absolute", c.WSLPath))
	}
	if c.Prefix != "" && !prefixPattern.MatchString(c.Prefix) {
		errs = append(errs, fmt.Errorf("Prefix %q: want 1 to 20 of [A-Za-z0-9._-]", c.Prefix))
	}
	d := c.withDefaults()
	if d.FirstPort < 1024 || d.LastPort > 65535 || d.FirstPort > d.LastPort {
		errs = append(errs, fmt.Errorf("ports %d-%d: want a range within 1024-65535", d.FirstPort, d.LastPort))
	}
	if c.DefaultPids < 0 || c.ReadyTimeout < 0 {
		errs = append(errs, errors.New("DefaultPids and ReadyTimeout must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("wsl config: %w: %w", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

// withDefaults returns c with its zero fields filled in; it does not look
// for wsl.exe.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.FirstPort == 0 && c.LastPort == 0 {
		c.FirstPort, c.LastPort = DefaultFirstPort, DefaultLastPort
	}
	if c.DefaultPids == 0 {
		c.DefaultPids = DefaultPids
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// FindWSL returns the wsl.exe to use when Config.WSLPath is empty:
// $TUPPER_WSL, then wsl.exe on PATH, then %SystemRoot%\System32\wsl.exe.
// It fails with errdefs.ErrUnavailable when there is none.
func FindWSL() (string, error) {
	if p := os.Getenv(WSLEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("wsl.exe %s ($%s): %w: %w", p, WSLEnv, errdefs.ErrUnavailable, err)
		}
		return filepath.Abs(p)
	}
	if p, err := exec.LookPath("wsl.exe"); err == nil {
		return filepath.Abs(p)
	}
	if root := os.Getenv("SystemRoot"); root != "" {
		p := filepath.Join(root, "System32", "wsl.exe")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("wsl.exe not found on PATH nor in %%SystemRoot%%\\System32 (set %s): %w", WSLEnv, errdefs.ErrUnavailable)
}
