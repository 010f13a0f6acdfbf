// Package mcp is Tupper's MCP server: sandboxes as tools for any Model
// Context Protocol client. Its tools create, list and kill sandboxes, run
// commands (in the foreground, or in the background with their output kept
// here to poll), read and write files, and run code snippets.
//
// NewServer returns a github.com/modelcontextprotocol/go-sdk server that
// `tupper mcp` runs over stdio; Handler serves the same tools over
// Streamable HTTP, authenticated by API key, for `tupper serve`.
//
// Every tool has typed inputs and outputs (an inputSchema and an
// outputSchema) and also answers with a text rendering. The schemas are
// kept portable: no type unions, no untyped values, a description on every
// field. Failures come back as tool results with isError set whose text
// says what to do next; the server itself never fails a call for them.
//
// Sandboxes made here live for an idle timeout (MetadataIdleTimeout): each
// tool call that touches one pushes its end back, so that one an agent
// abandoned dies on its own. Who a call acts for is not the server's
// business but Tupper's: every call runs on the context Config.Scope
// returns, and under Handler the daemon scopes it to the session's API key
// in the engine itself, so that a key sees and touches only the sandboxes
// it made; any other answers not found. Nothing about owners is kept in a
// sandbox's metadata, which clients can read and write.
package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// ReservedMetadataPrefix starts the metadata keys that are Tupper's own:
// no call may set them (the daemon refuses them from every client) and
// none is shown.
const ReservedMetadataPrefix = "tupper."

// MetadataIdleTimeout holds the idle timeout, in seconds, of a sandbox
// made here. It is an ordinary label, outside the reserved prefix, since
// `tupper mcp` sets it through the daemon's API as any client could: all
// it decides is how far a tool call pushes the sandbox's end back, which
// whoever may see the sandbox may change anyway.
const MetadataIdleTimeout = "tupper-mcp-idle-timeout"

// Defaults of Config.
const (
	DefaultTimeout     = 10 * time.Minute
	DefaultOutputLimit = 64 << 10
	DefaultImageLimit  = 4 << 20
	// DefaultCommandTimeout bounds a foreground command that names no
	// timeout. It stays below the 60 seconds after which common MCP
	// clients give up on a call, so that the agent sees the timeout and
	// the partial output rather than a lost call.
	DefaultCommandTimeout = 50 * time.Second
)

// SupportedProtocolVersions are the MCP protocol versions the server
// negotiates, newest first.
var SupportedProtocolVersions = []string{"2026-07-28", "2025-11-25", "2025-06-18"}

// Config configures the MCP server.
type Config struct {
	// Client reaches Tupper. Required.
	Client *sdk.Client
	// DefaultTimeout is the idle timeout of a sandbox whose create names
	// none: it is killed after this long without a tool call touching
	// it. Zero means DefaultTimeout.
	DefaultTimeout time.Duration
	// OutputLimit caps, in bytes, each output a tool returns (a
	// command's stdout, a file's content); longer ones are cut with a
	// marker saying how much was shown. Zero means DefaultOutputLimit.
	OutputLimit int
	// ImageLimit caps the size of an image read_file returns as image
	// content; larger images fail with a note. Zero means
	// DefaultImageLimit.
	ImageLimit int
	// Scope returns the context a tool call's requests to Client run on,
	// from the context of the call, on which CallerKey reads the API key
	// of an HTTP session: the daemon puts the key's scope there, which its
	// engine enforces. An error refuses the call. Nil runs calls on their
	// own context: the Client's credentials decide what they may see.
	// Handler requires it.
	Scope func(ctx context.Context) (context.Context, error)
	// Tags are added to the metadata of every sandbox the server creates,
	// for example to find and kill them when the server stops.
	Tags map[string]string
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
	// Name and Version describe the server to clients; empty means
	// "tupper" and "dev".
	Name, Version string
}

// Validate fills defaults and checks the configuration.
func (c *Config) Validate() error {
	if c.Client == nil {
		return fmt.Errorf("mcp: Client is required: %w", errdefs.ErrInvalidArgument)
	}
	if c.DefaultTimeout < 0 || c.OutputLimit < 0 || c.ImageLimit < 0 {
		return fmt.Errorf("mcp: timeouts and limits must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	for k := range c.Tags {
		if strings.HasPrefix(k, ReservedMetadataPrefix) || k == MetadataIdleTimeout {
			return fmt.Errorf("mcp: tag %q: keys under %q and %q are Tupper's own: %w", k, ReservedMetadataPrefix, MetadataIdleTimeout, errdefs.ErrInvalidArgument)
		}
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.OutputLimit == 0 {
		c.OutputLimit = DefaultOutputLimit
	}
	if c.ImageLimit == 0 {
		c.ImageLimit = DefaultImageLimit
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Name == "" {
		c.Name = "tupper"
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	return nil
}

// instructions tell a client's model how the tools fit together.
const instructions = `Tupper runs code in disposable, isolated sandboxes (gVisor).
Start with create_sandbox (or list_sandboxes to reuse one), then run_command, run_code and the file tools with its sandbox id.
For data work, create_sandbox with template code-interpreter: run_code then keeps variables between runs, as a notebook, and returns plots as images.
Long-running commands: run_command with background: true returns a pid at once; poll command_output, send input with send_stdin, stop with kill_command.
A sandbox is killed after its idle timeout without tool calls; kill_sandbox when done.
pause_sandbox saves an idle sandbox to disk until a tool call resumes it; snapshot_sandbox and fork_sandbox copy one with its processes and memory.`

// NewServer returns an MCP server with Tupper's tools. Run it over stdio
// with Server.Run, or serve it over HTTP (see Handler).
func NewServer(cfg Config) (*mcpsdk.Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &tools{
		cfg:    cfg,
		client: cfg.Client,
		log:    cfg.Logger.With("component", "mcp"),
		bg:     newBackgroundSet(cfg.OutputLimit),
	}
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: cfg.Name, Title: "Tupper sandboxes", Version: cfg.Version}, &mcpsdk.ServerOptions{
		Instructions:              instructions,
		Logger:                    sdkLogger(cfg.Logger),
		SupportedProtocolVersions: SupportedProtocolVersions,
		// No logging capability: the tools are all there is.
		Capabilities: &mcpsdk.ServerCapabilities{},
	})
	t.register(s)
	return s, nil
}

// sdkLogger is the logger handed to the go-sdk: it logs every session's
// comings and goings at info level, which is debugging detail here, so it
// gets cfg's logger only when that logs debug messages.
func sdkLogger(l *slog.Logger) *slog.Logger {
	if !l.Enabled(context.Background(), slog.LevelDebug) {
		return nil
	}
	return l.With("component", "mcp-sdk")
}

// tools holds what the tool handlers share. It is safe for concurrent use.
type tools struct {
	cfg    Config
	client *sdk.Client
	log    *slog.Logger
	bg     *backgroundSet
}

// handler is a tool handler, called on the context of the call as
// Config.Scope made it.
type handler[In, Out any] func(ctx context.Context, in In) (*mcpsdk.CallToolResult, Out, error)

// tokenKey carries the caller's token info on the context Scope receives.
type tokenKey struct{}

// teamExtra is the TokenInfo.Extra entry in which Handler passes the team
// of the session's API key.
const teamExtra = "team"

// CallerKey returns the id and the team of the API key that authenticated
// the HTTP session of a tool call, and false when the call came in
// another way (stdio).
func CallerKey(ctx context.Context) (id, team string, ok bool) {
	ti, _ := ctx.Value(tokenKey{}).(*mcpauth.TokenInfo)
	if ti == nil || ti.UserID == "" {
		return "", "", false
	}
	team, _ = ti.Extra[teamExtra].(string)
	return ti.UserID, team, true
}

// addTool registers a typed tool whose schemas are derived from In and
// Out, made portable, with the given enums on input properties.
func addTool[In, Out any](s *mcpsdk.Server, t *tools, tool *mcpsdk.Tool, enums map[string][]any, h handler[In, Out]) {
	tool.InputSchema = schemaFor[In](enums)
	tool.OutputSchema = schemaFor[Out](nil)
	mcpsdk.AddTool(s, tool, func(ctx context.Context, req *mcpsdk.CallToolRequest, in In) (*mcpsdk.CallToolResult, Out, error) {
		var zero Out
		if req.Extra != nil && req.Extra.TokenInfo != nil {
			ctx = context.WithValue(ctx, tokenKey{}, req.Extra.TokenInfo)
		}
		key, _, _ := CallerKey(ctx)
		if t.cfg.Scope != nil {
			scoped, err := t.cfg.Scope(ctx)
			if err != nil {
				return nil, zero, err
			}
			ctx = scoped
		}
		start := time.Now()
		res, out, err := h(ctx, in)
		log := t.log.With("op", tool.Name, "key", key, "took", time.Since(start).Round(time.Millisecond))
		if err != nil {
			log.Info("tool call failed", "err", err)
			return nil, zero, err
		}
		log.Debug("tool call")
		return res, out, nil
	})
}

// schemaFor derives T's JSON schema and makes it portable across clients:
// the go-sdk's inference spells slices and pointers as ["null", T] type
// unions, which clients that map schemas onto a single-type dialect reject,
// so the null branch is dropped (outputs never carry null: nil slices and
// pointers are omitted or made empty). enums restrict top-level string
// properties to their values.
func schemaFor[T any](enums map[string][]any) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: schema of %T: %v", *new(T), err))
	}
	portable(s)
	for name, values := range enums {
		p := s.Properties[name]
		if p == nil {
			panic(fmt.Sprintf("mcp: schema of %T has no property %q for an enum", *new(T), name))
		}
		p.Enum = values
	}
	return s
}

func portable(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) > 0 {
		var kept []string
		for _, t := range s.Types {
			if t != "null" {
				kept = append(kept, t)
			}
		}
		if len(kept) == 1 {
			s.Type, s.Types = kept[0], nil
		} else {
			s.Types = kept
		}
	}
	for _, p := range s.Properties {
		portable(p)
	}
	portable(s.Items)
	portable(s.AdditionalProperties)
}

// register adds every tool to s.
func (t *tools) register(s *mcpsdk.Server) {
	t.registerSandboxes(s)
	t.registerCommands(s)
	t.registerFiles(s)
	t.registerCode(s)
	t.registerLifecycle(s)
}

// Hints for tool annotations.
var (
	yes = func() *bool { b := true; return &b }()
	no  = func() *bool { b := false; return &b }()
)
