package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// maxBodyBytes bounds a control-plane request body: the largest real one
// is a create with metadata and environment variables.
const maxBodyBytes = 1 << 20

// maxTimeoutSeconds bounds a timeout before it becomes a time.Duration;
// the engine applies its own, much smaller, maximum.
const maxTimeoutSeconds = 10 * 365 * 24 * 3600

// createBody is the body of POST /sandboxes and POST /v2/sandboxes. Unknown
// fields are ignored, as the E2B API does, so newer SDKs keep working.
type createBody struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *float64          `json:"timeout"` // seconds
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *netpolicy.Policy `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          json.RawMessage   `json:"autoResume"`
	VolumeMounts        []volumeMount     `json:"volumeMounts"`
	// CPUCount, MemoryMB and DiskSizeMB are Tupper's extensions (E2B
	// fixes them in the template), named as in the listing.
	CPUCount   float64 `json:"cpuCount"`
	MemoryMB   int     `json:"memoryMB"`
	DiskSizeMB int     `json:"diskSizeMB"`
	// Backend is Tupper's extension too: the backend to run the sandbox
	// on ("gvisor", "runc"…), named as the listing reports it; empty means
	// the daemon's default.
	Backend string `json:"backend"`
}

// connectBody is the body of POST /sandboxes/{id}/connect and of resume.
type connectBody struct {
	Timeout *float64 `json:"timeout"`
	// Memory false asks a paused sandbox for a reboot on its files
	// rather than a restore; it changes nothing for a running one.
	Memory *bool `json:"memory"`
}

// timeoutBody is the body of POST /sandboxes/{id}/timeout.
type timeoutBody struct {
	Timeout *float64 `json:"timeout"`
}

// networkBody is the body of PUT /sandboxes/{id}/network. It replaces the
// egress settings; fields left out are cleared.
type networkBody struct {
	AllowOut            []string                    `json:"allowOut"`
	DenyOut             []string                    `json:"denyOut"`
	Rules               map[string][]netpolicy.Rule `json:"rules"`
	AllowInternetAccess *bool                       `json:"allow_internet_access"`
	EgressProxy         json.RawMessage             `json:"egressProxy"`
}

// readBody reads a request body of at most maxBodyBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, fmt.Errorf("request body is larger than %d bytes: %w", maxBodyBytes, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	return data, nil
}

// decodeJSON decodes one JSON value from data into v. An empty body
// decodes to v's zero value. Errors wrap errdefs.ErrInvalidArgument and say
// what is wrong in terms of the request.
func decodeJSON(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("request body holds more than one JSON value: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("request body is not valid JSON: %s (at byte %d): %w", syntax, syntax.Offset, errdefs.ErrInvalidArgument)
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Errorf("request body: field %q must be %s, not %s: %w", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value, errdefs.ErrInvalidArgument)
	case errors.As(err, &typ):
		return fmt.Errorf("request body must be a JSON object, not %s: %w", typ.Value, errdefs.ErrInvalidArgument)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("request body is not valid JSON: it ends too early: %w", errdefs.ErrInvalidArgument)
	default:
		return fmt.Errorf("request body is not valid JSON: %v: %w", err, errdefs.ErrInvalidArgument)
	}
}

// jsonKind names a Go kind the way a JSON user thinks of it.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "float64", "float32", "int", "int64", "uint32":
		return "a number"
	case "bool":
		return "true or false"
	case "map", "struct":
		return "an object"
	case "slice":
		return "an array"
	default:
		return "a " + kind
	}
}

// seconds turns a timeout in seconds into a Duration, rounding fractions
// up. Nil is zero.
func seconds(field string, v *float64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	switch {
	case *v < 0:
		return 0, fmt.Errorf("%s %s is negative: %w", field, strconv.FormatFloat(*v, 'f', -1, 64), errdefs.ErrInvalidArgument)
	case *v > maxTimeoutSeconds:
		return 0, fmt.Errorf("%s of %s seconds is too long: %w", field, strconv.FormatFloat(*v, 'f', -1, 64), errdefs.ErrInvalidArgument)
	}
	return time.Duration(math.Ceil(*v)) * time.Second, nil
}

// decodeCreate parses and checks a create body.
// decodeCreate parses a create body into what the engine takes: the
// request has this one shape from the wire to the engine (createBody is
// only its JSON spelling).
func decodeCreate(data []byte) (engine.CreateOptions, error) {
	var b createBody
	if err := decodeJSON(data, &b); err != nil {
		return engine.CreateOptions{}, err
	}
	timeout, err := seconds("timeout", b.Timeout)
	if err != nil {
		return engine.CreateOptions{}, err
	}
	var mounts []engine.VolumeMount
	for _, m := range b.VolumeMounts {
		mounts = append(mounts, engine.VolumeMount{Name: m.Name, Path: m.Path})
	}
	if b.CPUCount < 0 || b.MemoryMB < 0 || b.DiskSizeMB < 0 || math.IsNaN(b.CPUCount) || math.IsInf(b.CPUCount, 0) {
		return engine.CreateOptions{}, fmt.Errorf("cpuCount, memoryMB and diskSizeMB must be positive numbers: %w", errdefs.ErrInvalidArgument)
	}
	if b.Network != nil {
		if err := b.Network.Normalize(); err != nil {
			return engine.CreateOptions{}, err
		}
	}
	autoResume, err := decodeAutoResume(b.AutoResume)
	if err != nil {
		return engine.CreateOptions{}, err
	}
	return engine.CreateOptions{
		Template: b.TemplateID, Timeout: timeout, Metadata: b.Metadata, Env: b.EnvVars,
		CPUs: b.CPUCount, MemoryMB: b.MemoryMB, DiskMB: b.DiskSizeMB,
		Network: b.Network, AllowInternetAccess: b.AllowInternetAccess,
		Secure: b.Secure, AutoPause: b.AutoPause != nil && *b.AutoPause, Backend: b.Backend,
		AutoPauseMemory: b.AutoPauseMemory, AutoResume: autoResume, VolumeMounts: mounts,
	}, nil
}

// decodeAutoResume reads a create's autoResume: {"enabled": bool} as the
// SDKs send it, or a bare bool.
func decodeAutoResume(raw json.RawMessage) (bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	var on bool
	if json.Unmarshal(raw, &on) == nil {
		return on, nil
	}
	var obj struct {
		Enabled bool `json:"enabled"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return false, fmt.Errorf(`autoResume must be {"enabled": true|false}: %w`, errdefs.ErrInvalidArgument)
	}
	return obj.Enabled, nil
}

// decodeConnect parses a connect or resume body; an empty one is fine.
// reboot is its "memory": false, which asks a paused sandbox to boot anew
// on its files rather than be restored.
func decodeConnect(data []byte) (timeout time.Duration, reboot bool, err error) {
	var b connectBody
	if err := decodeJSON(data, &b); err != nil {
		return 0, false, err
	}
	timeout, err = seconds("timeout", b.Timeout)
	return timeout, b.Memory != nil && !*b.Memory, err
}

// decodeTimeout parses a set-timeout body, which must name a positive
// timeout.
func decodeTimeout(data []byte) (time.Duration, error) {
	var b timeoutBody
	if err := decodeJSON(data, &b); err != nil {
		return 0, err
	}
	if b.Timeout == nil {
		return 0, fmt.Errorf(`request body must be {"timeout": <seconds>}: %w`, errdefs.ErrInvalidArgument)
	}
	d, err := seconds("timeout", b.Timeout)
	if err != nil {
		return 0, err
	}
	if d == 0 {
		return 0, fmt.Errorf("timeout must be at least 1 second: %w", errdefs.ErrInvalidArgument)
	}
	return d, nil
}

// decodeNetwork parses a network update body into the policy that
// replaces the sandbox's egress settings (the engine keeps who may reach
// its ports).
func decodeNetwork(data []byte) (*netpolicy.Policy, *bool, error) {
	var b networkBody
	if err := decodeJSON(data, &b); err != nil {
		return nil, nil, err
	}
	p := &netpolicy.Policy{AllowOut: b.AllowOut, DenyOut: b.DenyOut, Rules: b.Rules, EgressProxy: b.EgressProxy}
	if err := p.Normalize(); err != nil {
		return nil, nil, err
	}
	return p, b.AllowInternetAccess, nil
}
