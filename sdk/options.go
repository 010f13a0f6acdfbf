package sdk

import (
	"maps"
	"time"
)

// DefaultCommandTimeout is how long a command may run when no WithTimeout
// option is given, as in the E2B SDKs: the agent kills the process when it
// expires.
const DefaultCommandTimeout = 60 * time.Second

// CommandOption is a per-call option of Commands.Run, Commands.Start and
// Commands.Connect.
type CommandOption interface {
	applyCommand(*commandOptions)
}

// FileOption is a per-call option of the Files methods.
type FileOption interface {
	applyFile(*fileOptions)
}

type commandOptions struct {
	envs     map[string]string
	cwd      string
	user     string
	timeout  time.Duration
	onStdout func(string)
	onStderr func(string)
	stdin    bool
	tag      string
	// keep bounds the output a handle keeps per stream: 0 keeps all, a
	// positive n the last n bytes, a negative value none.
	keep int
}

func newCommandOptions(opts []CommandOption) *commandOptions {
	o := &commandOptions{timeout: DefaultCommandTimeout}
	for _, opt := range opts {
		if opt != nil {
			opt.applyCommand(o)
		}
	}
	return o
}

type fileOptions struct {
	user string
}

func newFileOptions(opts []FileOption) *fileOptions {
	o := &fileOptions{}
	for _, opt := range opts {
		if opt != nil {
			opt.applyFile(o)
		}
	}
	return o
}

type commandOption func(*commandOptions)

func (f commandOption) applyCommand(o *commandOptions) { f(o) }

// UserOption picks the user a call acts as. It is both a CommandOption and
// a FileOption.
type UserOption struct{ name string }

func (u UserOption) applyCommand(o *commandOptions) { o.user = u.name }
func (u UserOption) applyFile(o *fileOptions)       { o.user = u.name }

// WithUser makes a command run, or a file operation act, as the named user
// of the sandbox ("root", "user"). Without it the sandbox's default user
// applies (`user` in E2B-style images), and relative paths resolve against
// that user's home directory.
func WithUser(name string) UserOption { return UserOption{name: name} }

// WithEnv adds environment variables to the command, on top of the
// sandbox's own. The map is copied.
func WithEnv(env map[string]string) CommandOption {
	env = maps.Clone(env)
	return commandOption(func(o *commandOptions) {
		if o.envs == nil {
			o.envs = map[string]string{}
		}
		maps.Copy(o.envs, env)
	})
}

// WithCwd sets the command's working directory; the default is the user's
// home directory.
func WithCwd(dir string) CommandOption {
	return commandOption(func(o *commandOptions) { o.cwd = dir })
}

// WithTimeout bounds how long the command may run: the agent kills it when
// the time is up, and the handle's stream ends with an error of class
// errdefs.ErrDeadlineExceeded. Zero means no limit. The default is
// DefaultCommandTimeout. On Commands.Connect it bounds how long the new
// stream follows the process.
func WithTimeout(d time.Duration) CommandOption {
	return commandOption(func(o *commandOptions) { o.timeout = max(d, 0) })
}

// WithOnStdout calls fn with each chunk of standard output as it arrives.
// Callbacks of one command run one at a time on a goroutine of its handle,
// in the order the output arrived; a slow callback slows the stream.
func WithOnStdout(fn func(string)) CommandOption {
	return commandOption(func(o *commandOptions) { o.onStdout = fn })
}

// WithOnStderr calls fn with each chunk of standard error as it arrives,
// under the same rules as WithOnStdout.
func WithOnStderr(fn func(string)) CommandOption {
	return commandOption(func(o *commandOptions) { o.onStderr = fn })
}

// WithMaxOutput bounds the output a command's result and handle keep: the
// last n bytes of stdout and of stderr each, or none when n is negative. The
// default keeps everything, as E2B's SDKs do; callers that stream a chatty
// command through WithOnStdout should bound it, since the callbacks still see
// every byte.
func WithMaxOutput(n int) CommandOption {
	return commandOption(func(o *commandOptions) { o.keep = n })
}

// WithStdin keeps the command's standard input open for SendStdin. Without
// it (the default, as in E2B) standard input is /dev/null.
func WithStdin(open bool) CommandOption {
	return commandOption(func(o *commandOptions) { o.stdin = open })
}

// WithTag names the command so that Commands.ConnectTag can find it again.
func WithTag(tag string) CommandOption {
	return commandOption(func(o *commandOptions) { o.tag = tag })
}
