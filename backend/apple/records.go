package apple

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/lightbearco/tupper/backend"
)

// The states `container` gives a container (RuntimeStatus).
const (
	stateRunning  = "running"
	stateStopped  = "stopped"
	stateStopping = "stopping"
)

// record is what the backend reads of one container in the JSON of
// `container list --format json` and `container inspect`.
type record struct {
	ID     string
	Labels map[string]string
	State  string
	// Addr is the container's first IPv4 address; invalid when it has
	// none (it is not running, or its network is not up yet).
	Addr netip.Addr
}

// The JSON of a container changed shape twice; parseRecords reads each:
//
//   - 1.0 and later print ManagedContainer: the state and the networks
//     moved into an object, {"id", "configuration", "status": {"state",
//     "networks": [{"ipv4Address": "192.168.64.3/24", …}], "startedDate"}}.
//   - 0.8 to 0.12 print the snapshot flat: {"status": "running",
//     "configuration", "networks": [{"ipv4Address": "192.168.64.3/24",
//     "ipv4Gateway", "macAddress"?, …}]}.
//   - 0.7 and earlier have the same flat shape with the older Attachment,
//     {"network", "hostname", "address": "192.168.64.3/24", "gateway"}.
//
// Every version keeps the name and the labels in configuration.id and
// configuration.labels.
type jsonContainer struct {
	ID            string `json:"id"`
	Configuration struct {
		ID     string            `json:"id"`
		Labels map[string]string `json:"labels"`
	} `json:"configuration"`
	// Status is a string before 1.0 and an object from 1.0 on.
	Status   json.RawMessage  `json:"status"`
	Networks []jsonAttachment `json:"networks"`
}

// jsonStatus is the status object of 1.0 and later.
type jsonStatus struct {
	State    string           `json:"state"`
	Networks []jsonAttachment `json:"networks"`
}

// jsonAttachment is a container's interface on a network: ipv4Address
// from 0.8 on, address before.
type jsonAttachment struct {
	IPv4Address string `json:"ipv4Address"`
	Address     string `json:"address"`
}

// parseRecords reads a JSON array of containers in any of the shapes above.
func parseRecords(data []byte) ([]record, error) {
	var raw []jsonContainer
	if err := json.Unmarshal(bytes.TrimSpace(data), &raw); err != nil {
		return nil, fmt.Errorf("not a JSON array of containers (%v); the output starts %q: the backend reads `container` 0.x to 1.x", err, head(data, 120))
	}
	out := make([]record, 0, len(raw))
	for i, c := range raw {
		r := record{ID: c.Configuration.ID, Labels: c.Configuration.Labels}
		if r.ID == "" {
			r.ID = c.ID
		}
		if r.ID == "" {
			return nil, fmt.Errorf("container %d of %d has no id (configuration.id)", i+1, len(raw))
		}
		nets := c.Networks
		status := bytes.TrimSpace(c.Status)
		switch {
		case len(status) > 0 && status[0] == '{':
			var s jsonStatus
			if err := json.Unmarshal(status, &s); err != nil {
				return nil, fmt.Errorf("container %s: status: %v", r.ID, err)
			}
			r.State = s.State
			nets = s.Networks
		case len(status) > 0 && status[0] == '"':
			if err := json.Unmarshal(status, &r.State); err != nil {
				return nil, fmt.Errorf("container %s: status: %v", r.ID, err)
			}
		default:
			return nil, fmt.Errorf("container %s has no status, or one of a shape the backend does not know: %q", r.ID, head(status, 80))
		}
		for _, n := range nets {
			a := n.IPv4Address
			if a == "" {
				a = n.Address
			}
			if addr, ok := parseAddr(a); ok {
				r.Addr = addr
				break
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// parseAddr reads an IPv4 address with or without a prefix length.
func parseAddr(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() {
		return p.Addr(), true
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return a, true
	}
	return netip.Addr{}, false
}

// jsonStats is one container of `container stats --format json`
// (ContainerStats; its fields are optional from 1.0 on).
type jsonStats struct {
	ID               string  `json:"id"`
	MemoryUsageBytes *uint64 `json:"memoryUsageBytes"`
	MemoryLimitBytes *uint64 `json:"memoryLimitBytes"`
	CPUUsageUsec     *uint64 `json:"cpuUsageUsec"`
	NumProcesses     *uint64 `json:"numProcesses"`
}

// parseStats reads container id's entry of `container stats --no-stream
// --format json`.
func parseStats(data []byte, id string) (*backend.Stats, error) {
	var raw []jsonStats
	if err := json.Unmarshal(bytes.TrimSpace(data), &raw); err != nil {
		return nil, fmt.Errorf("read the output of `container stats --format json`: not a JSON array of stats (%v); it starts %q", err, head(data, 120))
	}
	for _, s := range raw {
		if s.ID != id {
			continue
		}
		if s.MemoryUsageBytes == nil && s.CPUUsageUsec == nil && s.NumProcesses == nil {
			return nil, fmt.Errorf("`container stats` reports no figures for %s", id)
		}
		var st backend.Stats
		if s.CPUUsageUsec != nil {
			st.CPUUsageNanos = *s.CPUUsageUsec * 1000
		}
		if s.MemoryUsageBytes != nil {
			st.MemoryUsageBytes = *s.MemoryUsageBytes
		}
		if s.MemoryLimitBytes != nil {
			st.MemoryLimitBytes = *s.MemoryLimitBytes
		}
		if s.NumProcesses != nil {
			st.Pids = *s.NumProcesses
		}
		return &st, nil
	}
	return nil, fmt.Errorf("`container stats` reports nothing for %s", id)
}

// version is a `container` release.
type version struct{ Major, Minor, Patch int }

func (v version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

func (v version) atLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// versionLine matches `container --version`: "container CLI version 1.2.2
// (build: release, commit: 1a2b3c4)" (ReleaseVersion.singleLine).
var versionLine = regexp.MustCompile(`version\s+v?(\d+)\.(\d+)(?:\.(\d+))?`)

// parseVersion reads the output of `container --version`.
func parseVersion(out []byte) (version, error) {
	m := versionLine.FindSubmatch(out)
	if m == nil {
		return version{}, fmt.Errorf("`container --version` printed %q, which holds no version", head(out, 120))
	}
	var v version
	v.Major, _ = strconv.Atoi(string(m[1]))
	v.Minor, _ = strconv.Atoi(string(m[2]))
	if len(m[3]) > 0 {
		v.Patch, _ = strconv.Atoi(string(m[3]))
	}
	return v, nil
}

// parseSystemStatus reads the status ("running", "not running",
// "unregistered") from `container system status --format json`, which
// prints it even when it exits 1 because the services are down.
func parseSystemStatus(out []byte) (string, error) {
	var s struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &s); err != nil || s.Status == "" {
		return "", fmt.Errorf("`container system status --format json` printed %q, which holds no status", head(out, 120))
	}
	return s.Status, nil
}

// imageListed reports whether the JSON of `container image list --format
// json` names ref. Its shape differs between versions (0.x prints
// ImageDescription, {"reference", "descriptor"}; later ones wrap it), so
// any "reference" or "name" field at any depth counts. An image missed
// here is only loaded again.
func imageListed(out []byte, ref string) (bool, error) {
	var v any
	if err := json.Unmarshal(bytes.TrimSpace(out), &v); err != nil {
		return false, fmt.Errorf("read the output of `container image list --format json`: %v; it starts %q", err, head(out, 120))
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "reference" || k == "name") && s == ref {
					return true
				}
				if walk(x) {
					return true
				}
			}
		case []any:
			for _, x := range v {
				if walk(x) {
					return true
				}
			}
		}
		return false
	}
	return walk(v), nil
}

// head returns the first n bytes of b as a string, marked when cut.
func head(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
