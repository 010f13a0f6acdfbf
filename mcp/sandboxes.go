package mcp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/sdk"
)

// maxListed bounds the sandboxes list_sandboxes returns.
const maxListed = 1000

type networkPolicy struct {
	AllowOut []string `json:"allow_out,omitempty" jsonschema:"CIDR blocks, IP addresses, domain names or *.domain wildcards the sandbox may reach; wins over deny_out. Domains are checked on HTTP (port 80) and HTTPS (port 443)"`
	DenyOut  []string `json:"deny_out,omitempty" jsonschema:"CIDR blocks or IP addresses the sandbox may not reach; 0.0.0.0/0 blocks all egress"`
	// A pointer: absent and false differ.
	AllowInternetAccess *bool `json:"allow_internet_access,omitempty" jsonschema:"false denies all egress but what allow_out names (default true)"`
}

type createSandboxIn struct {
	Template       string            `json:"template,omitempty" jsonschema:"Template to start from; empty means the server's default (base: bash, coreutils, python3, node, git, curl). code-interpreter adds a stateful interpreter for run_code (Python with numpy, pandas and matplotlib; JavaScript, TypeScript, bash)"`
	Image          string            `json:"image,omitempty" jsonschema:"Image reference to start from instead of a template"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"Environment variables of every command in the sandbox"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"Idle timeout: the sandbox is killed after this many seconds without a tool call on it (default 600)"`
	Metadata       map[string]string `json:"metadata,omitempty" jsonschema:"Labels to find the sandbox by with list_sandboxes; keys starting with tupper. are reserved"`
	CPUs           float64           `json:"cpus,omitempty" jsonschema:"CPU cores (default 1)"`
	MemoryMB       int               `json:"memory_mb,omitempty" jsonschema:"Memory limit in MB (default 1024)"`
	DiskMB         int               `json:"disk_mb,omitempty" jsonschema:"Disk size in MB: what the sandbox may write, /tmp included (default: the server's, 10240 unless it was started with another)"`
	Network        *networkPolicy    `json:"network,omitempty" jsonschema:"Egress policy (default: the internet is reachable). The host, other sandboxes and private addresses are never reachable. A refused connection fails at once; a refused DNS lookup answers REFUSED"`
}

type sandboxOut struct {
	SandboxID          string            `json:"sandbox_id" jsonschema:"The sandbox's id: pass it as sandbox to the other tools"`
	Template           string            `json:"template" jsonschema:"Template or image the sandbox started from"`
	State              string            `json:"state" jsonschema:"running or paused"`
	StartedAt          string            `json:"started_at" jsonschema:"When the sandbox started (RFC 3339)"`
	ExpiresAt          string            `json:"expires_at" jsonschema:"When the sandbox is killed unless a tool call on it comes first (RFC 3339)"`
	IdleTimeoutSeconds int               `json:"idle_timeout_seconds,omitempty" jsonschema:"Seconds without a tool call after which the sandbox is killed"`
	Metadata           map[string]string `json:"metadata,omitempty" jsonschema:"The sandbox's labels"`
}

type createSandboxOut struct {
	Sandbox sandboxOut `json:"sandbox" jsonschema:"The new sandbox"`
	Note    string     `json:"note,omitempty" jsonschema:"Something about the create worth knowing, such as settings not enforced"`
}

type listSandboxesIn struct {
	Metadata map[string]string `json:"metadata,omitempty" jsonschema:"Keep only sandboxes whose labels hold all these pairs"`
}

type listSandboxesOut struct {
	Sandboxes []sandboxOut `json:"sandboxes" jsonschema:"Your running sandboxes"`
	Truncated bool         `json:"truncated,omitempty" jsonschema:"Set when there were more sandboxes than listed"`
}

type sandboxIn struct {
	Sandbox string `json:"sandbox" jsonschema:"Id of the sandbox (from create_sandbox or list_sandboxes)"`
}

type killSandboxOut struct {
	SandboxID string `json:"sandbox_id" jsonschema:"The sandbox that was killed"`
	Killed    bool   `json:"killed" jsonschema:"Always true: failures are errors"`
}

func (t *tools) registerSandboxes(s *mcpsdk.Server) {
	addTool(s, t, &mcpsdk.Tool{
		Name:  "create_sandbox",
		Title: "Create a sandbox",
		Description: "Create an isolated Linux sandbox (gVisor) and return its id. " +
			"It is killed after its idle timeout without tool calls on it; call kill_sandbox when done.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: no, OpenWorldHint: no},
	}, nil, t.createSandbox)
	addTool(s, t, &mcpsdk.Tool{
		Name:        "list_sandboxes",
		Title:       "List sandboxes",
		Description: "List your running sandboxes, optionally only those whose metadata hold the given pairs.",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: no},
	}, nil, t.listSandboxes)
	addTool(s, t, &mcpsdk.Tool{
		Name:        "kill_sandbox",
		Title:       "Kill a sandbox",
		Description: "Kill a sandbox and everything running in it. Its files are gone for good.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: yes, IdempotentHint: true, OpenWorldHint: no},
	}, nil, t.killSandbox)
}

func (t *tools) createSandbox(ctx context.Context, in createSandboxIn) (*mcpsdk.CallToolResult, createSandboxOut, error) {
	var out createSandboxOut
	if in.Template != "" && in.Image != "" {
		return nil, out, errArgument("name a template or an image, not both")
	}
	if in.TimeoutSeconds < 0 || in.CPUs < 0 || in.MemoryMB < 0 || in.DiskMB < 0 {
		return nil, out, errArgument("timeout_seconds, cpus, memory_mb and disk_mb must not be negative")
	}
	md := map[string]string{}
	for k, v := range in.Metadata {
		if strings.HasPrefix(k, ReservedMetadataPrefix) || k == MetadataIdleTimeout {
			return nil, out, errArgument("metadata key %q: keys starting with %q, and %q, are reserved for Tupper: choose another key", k, ReservedMetadataPrefix, MetadataIdleTimeout)
		}
		md[k] = v
	}
	maps.Copy(md, t.cfg.Tags)
	idle := t.cfg.DefaultTimeout
	if in.TimeoutSeconds > 0 {
		idle = time.Duration(in.TimeoutSeconds) * time.Second
	}
	md[MetadataIdleTimeout] = strconv.Itoa(int(idle / time.Second))
	opts := sdk.CreateOptions{
		Template: in.Template, Image: in.Image, Timeout: idle, Metadata: md, Envs: in.Env,
		CPUs: in.CPUs, MemoryMB: in.MemoryMB, DiskMB: in.DiskMB,
	}
	if in.Network != nil {
		opts.Network = &sdk.NetworkPolicy{AllowOut: in.Network.AllowOut, DenyOut: in.Network.DenyOut}
		opts.AllowInternetAccess = in.Network.AllowInternetAccess
	}
	sb, err := t.client.Create(ctx, opts)
	if err != nil {
		if sdk.IsResourceExhausted(err) && ctx.Err() == nil {
			return nil, out, fmt.Errorf("create sandbox: %w: Tupper is at capacity (creates under way, or live sandboxes): wait a few seconds and retry, or kill_sandbox those you no longer need", err)
		}
		return nil, out, explain(ctx, "create sandbox", "", err)
	}
	info := sb.Info()
	if info.EndAt.IsZero() {
		// A create over HTTP answers no times or state (E2B's API does
		// not): ask for them.
		if full, err := t.client.GetInfo(ctx, info.SandboxID); err == nil {
			info = *full
		}
	}
	if info.Metadata == nil {
		info.Metadata = md
	}
	out.Sandbox = sandboxView(&info)
	text := "created sandbox " + info.SandboxID + "\n" + renderSandbox(out.Sandbox)
	if out.Note != "" {
		text += "\nnote: " + out.Note
	}
	return textResult(text), out, nil
}

func (t *tools) listSandboxes(ctx context.Context, in listSandboxesIn) (*mcpsdk.CallToolResult, listSandboxesOut, error) {
	out := listSandboxesOut{Sandboxes: []sandboxOut{}}
	for k := range in.Metadata {
		if strings.HasPrefix(k, ReservedMetadataPrefix) {
			return nil, out, errArgument("metadata key %q: keys starting with %q are reserved for Tupper and never match", k, ReservedMetadataPrefix)
		}
	}
	opts := sdk.ListOptions{Metadata: in.Metadata, States: []string{"running", "paused"}}
	for {
		page, next, err := t.client.List(ctx, opts)
		if err != nil {
			return nil, out, explain(ctx, "list sandboxes", "", err)
		}
		for i := range page {
			if len(out.Sandboxes) == maxListed {
				out.Truncated = true
				break
			}
			out.Sandboxes = append(out.Sandboxes, sandboxView(&page[i]))
		}
		if next == "" || out.Truncated {
			break
		}
		opts.NextToken = next
	}
	slices.SortFunc(out.Sandboxes, func(a, b sandboxOut) int { return strings.Compare(a.StartedAt+a.SandboxID, b.StartedAt+b.SandboxID) })
	var b strings.Builder
	if len(out.Sandboxes) == 0 {
		b.WriteString("no sandboxes: call create_sandbox to make one")
	}
	for i, sb := range out.Sandboxes {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(renderSandbox(sb))
	}
	if out.Truncated {
		fmt.Fprintf(&b, "\n[truncated: showing the first %d sandboxes]", maxListed)
	}
	return textResult(b.String()), out, nil
}

func (t *tools) killSandbox(ctx context.Context, in sandboxIn) (*mcpsdk.CallToolResult, killSandboxOut, error) {
	var out killSandboxOut
	info, err := t.info(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	if err := t.client.Kill(ctx, info.SandboxID); err != nil {
		if sdk.IsNotFound(err) {
			return nil, out, errSandboxNotFound(info.SandboxID)
		}
		return nil, out, explain(ctx, "kill sandbox", info.SandboxID, err)
	}
	t.bg.forget(info.SandboxID)
	out = killSandboxOut{SandboxID: info.SandboxID, Killed: true}
	return textResult("killed sandbox " + info.SandboxID), out, nil
}

// info returns sandbox id when the caller may use it: what the caller may
// not see answers not found from Tupper itself.
func (t *tools) info(ctx context.Context, id string) (*sdk.SandboxInfo, error) {
	id = strings.TrimSpace(id)
	if id == "" {
		return nil, errArgument("sandbox is empty: pass an id from create_sandbox or list_sandboxes")
	}
	info, err := t.client.GetInfo(ctx, id)
	if err != nil {
		if sdk.IsNotFound(err) || sdk.IsInvalidArgument(err) {
			return nil, errSandboxNotFound(id)
		}
		return nil, explain(ctx, "look up sandbox", id, err)
	}
	return info, nil
}

// sandbox connects to sandbox id when the caller may use it, and pushes
// its idle timeout back.
func (t *tools) sandbox(ctx context.Context, id string) (*sdk.Sandbox, error) {
	info, err := t.info(ctx, id)
	if err != nil {
		return nil, err
	}
	t.keepAlive(ctx, info)
	sb, err := t.client.Connect(ctx, info.SandboxID)
	if err != nil {
		if sdk.IsNotFound(err) {
			return nil, errSandboxNotFound(info.SandboxID)
		}
		return nil, explain(ctx, "connect to sandbox", info.SandboxID, err)
	}
	return sb, nil
}

// keepAlive moves the end of a sandbox made with an idle timeout to a full
// idle timeout from now, once a quarter of it has passed.
func (t *tools) keepAlive(ctx context.Context, info *sdk.SandboxInfo) {
	secs, err := strconv.Atoi(info.Metadata[MetadataIdleTimeout])
	if err != nil || secs <= 0 {
		return
	}
	idle := time.Duration(secs) * time.Second
	if time.Until(info.EndAt) >= idle*3/4 {
		return
	}
	if err := t.client.SetTimeout(ctx, info.SandboxID, idle); err != nil {
		t.log.Warn("extend the idle timeout", "sandbox", info.SandboxID, "err", err)
	}
}

func sandboxView(info *sdk.SandboxInfo) sandboxOut {
	out := sandboxOut{
		SandboxID: info.SandboxID, Template: info.TemplateID, State: info.State,
		StartedAt: formatTime(info.StartedAt), ExpiresAt: formatTime(info.EndAt),
		Metadata: maps.Clone(info.Metadata),
	}
	// Records made before owners moved out of metadata may still carry
	// Tupper's own keys: they are nobody's business.
	maps.DeleteFunc(out.Metadata, func(k, _ string) bool { return strings.HasPrefix(k, ReservedMetadataPrefix) })
	if out.Template == "" {
		out.Template = info.Alias
	}
	if secs, err := strconv.Atoi(info.Metadata[MetadataIdleTimeout]); err == nil {
		out.IdleTimeoutSeconds = secs
	}
	return out
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func renderSandbox(s sandboxOut) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  template=%s  state=%s  expires=%s", s.SandboxID, s.Template, s.State, s.ExpiresAt)
	keys := slices.Sorted(maps.Keys(s.Metadata))
	for _, k := range keys {
		if k != MetadataIdleTimeout {
			fmt.Fprintf(&b, "  %s=%s", k, s.Metadata[k])
		}
	}
	return b.String()
}

// textResult is a result whose content is text; the go-sdk adds the
// structured output beside it.
func textResult(s string) *mcpsdk.CallToolResult {
	return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: s}}}
}
