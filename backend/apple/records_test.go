package apple

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
)

// Samples of `container list --all --format json` (and `container
// inspect`, which prints the same objects) in each shape the JSON has had.
// They are written for these tests after what each version prints:
//
//   - 1.x: ManagedContainer's encode(to:) (Sources/ContainerResource/
//     Container/ManagedContainer.swift): "id", "configuration", and a
//     "status" object holding "state", "networks" and "startedDate";
//     Attachment (Sources/ContainerResource/Network/Attachment.swift)
//     has ipv4Address as CIDR text; dates are Swift's default, seconds
//     since 2001-01-01. The configuration's fields follow the output
//     quoted in apple/container#1693.
//   - 0.8 to 0.12: the flat snapshot of apple/container#1693's `container
//     inspect` output ("status": "running", "configuration", "networks"),
//     with the ipv4Address/ipv4Gateway Attachment.
//   - 0.7 and earlier: PrintableContainer of ContainerList.swift (status,
//     configuration, networks) with the first Attachment, {"network",
//     "hostname", "address", "gateway"}.
const (
	sample1x = `[
  {"id":"bt7q2kd0x9zv1m","configuration":{"id":"bt7q2kd0x9zv1m","runtimeHandler":"container-runtime-linux",
    "image":{"reference":"tupper.local/rootfs:2f9c0d1e4b5a6978","descriptor":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:9b1f3c0d2e4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9012a3b4c5d","size":405}},
    "labels":{"tupper.id":"bt7q2kd0x9zv1m","tupper.root":"5d41402abc4b2a76"},
    "initProcess":{"executable":"/.tupper/tupper-agent","arguments":["--addr",":49983"],"environment":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"workingDirectory":"/","terminal":false,"user":{"id":{"uid":0,"gid":0}},"supplementalGroups":[],"rlimits":[{"limit":"RLIMIT_NPROC","soft":1024,"hard":1024}]},
    "mounts":[{"type":{"virtiofs":{}},"source":"/Users/ada/.tupper/backends/apple/agent","destination":"/.tupper","options":["ro"]}],
    "platform":{"os":"linux","architecture":"arm64"},"resources":{"cpus":2,"memoryInBytes":1073741824},
    "networks":[{"network":"default","options":{"hostname":"bt7q2kd0x9zv1m"}}],"publishedPorts":[],"dns":{"nameservers":[],"searchDomains":[],"options":[]}},
   "status":{"state":"running","networks":[{"network":"default","hostname":"bt7q2kd0x9zv1m","ipv4Address":"192.168.64.3/24","ipv4Gateway":"192.168.64.1","macAddress":"de:ad:be:ef:00:03"}],"startedDate":786543210.123}},
  {"id":"web","configuration":{"id":"web","image":{"reference":"docker.io/library/nginx:latest","descriptor":{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0","size":10229}},
    "labels":{},"initProcess":{"executable":"/docker-entrypoint.sh","arguments":["nginx","-g","daemon off;"],"environment":[],"workingDirectory":"/","terminal":false,"user":{"id":{"uid":0,"gid":0}}},
    "mounts":[],"platform":{"os":"linux","architecture":"arm64"},"resources":{"cpus":4,"memoryInBytes":1073741824},"networks":[{"network":"default","options":{"hostname":"web"}}]},
   "status":{"state":"stopped","networks":[]},"exitCode":0,"exitedDate":786540000}
]`
	sample08 = `[
  {"status":"running","configuration":{"useInit":false,"labels":{"tupper.id":"bt7q2kd0x9zv1m","tupper.root":"5d41402abc4b2a76"},"publishedPorts":[],"ssh":false,
    "image":{"reference":"tupper.local\/rootfs:2f9c0d1e4b5a6978","descriptor":{"mediaType":"application\/vnd.oci.image.manifest.v1+json","digest":"sha256:9b1f3c0d2e4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9012a3b4c5d","size":405}},
    "publishedSockets":[],"platform":{"architecture":"arm64","os":"linux"},"networks":[{"network":"default","options":{"hostname":"bt7q2kd0x9zv1m.","mtu":1280}}],
    "mounts":[{"options":["ro"],"source":"\/Users\/ada\/.tupper\/backends\/apple\/agent\/","destination":"\/.tupper","type":{"virtiofs":{}}}],"capDrop":[],
    "initProcess":{"terminal":false,"rlimits":[],"arguments":["--addr",":49983"],"executable":"\/.tupper\/tupper-agent","supplementalGroups":[],"workingDirectory":"\/","environment":["PATH=\/usr\/local\/sbin:\/usr\/local\/bin:\/usr\/sbin:\/usr\/bin:\/sbin:\/bin"],"user":{"id":{"uid":0,"gid":0}}},
    "id":"bt7q2kd0x9zv1m","runtimeHandler":"container-runtime-linux","capAdd":[],"dns":{"nameservers":[],"searchDomains":[],"options":[]},"resources":{"cpus":2,"memoryInBytes":1073741824}},
   "networks":[{"network":"default","hostname":"bt7q2kd0x9zv1m.","ipv4Address":"192.168.64.3\/24","ipv4Gateway":"192.168.64.1","macAddress":"de:ad:be:ef:00:03"}]},
  {"status":"stopped","configuration":{"labels":{},"id":"web","image":{"reference":"docker.io\/library\/nginx:latest"},"platform":{"architecture":"arm64","os":"linux"}},"networks":[]}
]`
	sample07 = `[
  {"status":"running","configuration":{"id":"bt7q2kd0x9zv1m","labels":{"tupper.id":"bt7q2kd0x9zv1m","tupper.root":"5d41402abc4b2a76"},
    "image":{"reference":"tupper.local/rootfs:2f9c0d1e4b5a6978","descriptor":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:9b1f3c0d2e4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9012a3b4c5d","size":405}},
    "initProcess":{"executable":"/.tupper/tupper-agent","arguments":["--addr",":49983"],"environment":[],"workingDirectory":"/","terminal":false,"user":{"id":{"uid":0,"gid":0}}},
    "platform":{"os":"linux","architecture":"arm64"},"resources":{"cpus":2,"memoryInBytes":1073741824},"networks":["default"],"mounts":[]},
   "networks":[{"network":"default","hostname":"bt7q2kd0x9zv1m","address":"192.168.64.3/24","gateway":"192.168.64.1"}]},
  {"status":"stopped","configuration":{"id":"web","labels":{},"image":{"reference":"docker.io/library/nginx:latest"},"platform":{"os":"linux","architecture":"arm64"}},"networks":[]}
]`
)

func TestParseRecords(t *testing.T) {
	ours := map[string]string{LabelID: "bt7q2kd0x9zv1m", LabelRoot: "5d41402abc4b2a76"}
	want := []record{
		{ID: "bt7q2kd0x9zv1m", Labels: ours, State: stateRunning, Addr: netip.MustParseAddr("192.168.64.3")},
		{ID: "web", Labels: map[string]string{}, State: stateStopped},
	}
	tests := []struct {
		name string
		json string
		want []record
	}{
		{name: "1.x status object", json: sample1x, want: want},
		{name: "0.8-0.12 flat ipv4Address", json: sample08, want: want},
		{name: "0.7 flat address", json: sample07, want: want},
		{name: "empty list", json: "[]\n", want: []record{}},
		{name: "running without a network yet", json: `[{"id":"a1","configuration":{"id":"a1"},"status":{"state":"running","networks":[]}}]`,
			want: []record{{ID: "a1", State: stateRunning}}},
		{name: "bare address", json: `[{"status":"running","configuration":{"id":"a1"},"networks":[{"ipv4Address":"192.168.64.9"}]}]`,
			want: []record{{ID: "a1", State: stateRunning, Addr: netip.MustParseAddr("192.168.64.9")}}},
		{name: "IPv6 first, then IPv4", json: `[{"id":"a1","configuration":{"id":"a1"},"status":{"state":"running","networks":[{"ipv4Address":"fd00::3/64"},{"ipv4Address":"192.168.65.4/24"}]}}]`,
			want: []record{{ID: "a1", State: stateRunning, Addr: netip.MustParseAddr("192.168.65.4")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRecords([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseRecordsErrors(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{name: "not JSON", json: "Error: XPC connection error: Connection invalid", want: "not a JSON array of containers"},
		{name: "an object, not an array", json: `{"status":"running"}`, want: "not a JSON array"},
		{name: "no id", json: `[{"status":"running","configuration":{}}]`, want: "has no id"},
		{name: "no status", json: `[{"configuration":{"id":"a1"}}]`, want: "has no status"},
		{name: "status of an unknown shape", json: `[{"configuration":{"id":"a1"},"status":3}]`, want: "has no status, or one of a shape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseRecords([]byte(tt.json))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseRecords = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestParseStats(t *testing.T) {
	// ContainerStats as `container stats --no-stream --format json` prints
	// it (Sources/ContainerClient/Core/ContainerStats.swift), for two
	// containers.
	const out = `[{"id":"web","memoryUsageBytes":1,"memoryLimitBytes":2,"cpuUsageUsec":3,"networkRxBytes":0,"networkTxBytes":0,"blockReadBytes":0,"blockWriteBytes":0,"numProcesses":4},
{"id":"bt7q2kd0x9zv1m","memoryUsageBytes":73400320,"memoryLimitBytes":1073741824,"cpuUsageUsec":2500000,"networkRxBytes":5120,"networkTxBytes":2048,"blockReadBytes":1048576,"blockWriteBytes":0,"numProcesses":7,"storageBackend":"ext4"}]`
	got, err := parseStats([]byte(out), "bt7q2kd0x9zv1m")
	if err != nil {
		t.Fatal(err)
	}
	want := &backend.Stats{CPUUsageNanos: 2_500_000_000, MemoryUsageBytes: 73400320, MemoryLimitBytes: 1 << 30, Pids: 7}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if _, err := parseStats([]byte(out), "other"); err == nil || !strings.Contains(err.Error(), "reports nothing for other") {
		t.Errorf("stats of a container not in the output: %v", err)
	}
	if _, err := parseStats([]byte(`[{"id":"a"}]`), "a"); err == nil || !strings.Contains(err.Error(), "no figures") {
		t.Errorf("stats without figures: %v", err)
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		out  string
		want version
		ok1  bool
	}{
		// ReleaseVersion.singleLine of 0.x and 1.x.
		{out: "container CLI version 1.2.2 (build: release, commit: 3c5a1f0)\n", want: version{1, 2, 2}, ok1: true},
		{out: "container CLI version 0.12.3 (build: release, commit: 8e1d0c3)\n", want: version{0, 12, 3}},
		{out: "container CLI version 0.5.0 (build: debug, commit: unspecified)\n", want: version{0, 5, 0}},
		{out: "container CLI version 1.0 (build: release, commit: abc1234)", want: version{1, 0, 0}, ok1: true},
		{out: "container CLI version 2.0.0-rc1 (build: release, commit: abc1234)", want: version{2, 0, 0}, ok1: true},
	}
	for _, tt := range tests {
		got, err := parseVersion([]byte(tt.out))
		if err != nil || got != tt.want || got.atLeast(1, 0) != tt.ok1 {
			t.Errorf("parseVersion(%q) = %v, %v (≥1.0: %v); want %v (≥1.0: %v)", tt.out, got, err, got.atLeast(1, 0), tt.want, tt.ok1)
		}
	}
	if _, err := parseVersion([]byte("zsh: command not found: container")); err == nil {
		t.Error("parseVersion of no version succeeded")
	}
}

func TestParseSystemStatus(t *testing.T) {
	// SystemStatus.PrintableStatus (Sources/ContainerCommands/System/
	// SystemStatus.swift), running and not.
	tests := []struct{ out, want string }{
		{out: `{"status":"running","appRoot":"\/Users\/ada\/Library\/Application Support\/com.apple.container\/","installRoot":"\/usr\/local\/","logRoot":null,"apiServerVersion":"container-apiserver version 1.2.2","apiServerCommit":"3c5a1f0","apiServerBuild":"release","apiServerAppName":"container-apiserver"}`, want: "running"},
		{out: `{"status":"not running","appRoot":"","installRoot":"","apiServerVersion":"","apiServerCommit":"","apiServerBuild":"","apiServerAppName":""}`, want: "not running"},
		{out: `{"status":"unregistered","appRoot":"","installRoot":"","apiServerVersion":"","apiServerCommit":"","apiServerBuild":"","apiServerAppName":""}`, want: "unregistered"},
	}
	for _, tt := range tests {
		if got, err := parseSystemStatus([]byte(tt.out)); err != nil || got != tt.want {
			t.Errorf("parseSystemStatus = %q, %v; want %q", got, err, tt.want)
		}
	}
	// 0.x before 0.12.3 had no --format json: its table is no status.
	if _, err := parseSystemStatus([]byte("apiserver is running\n")); err == nil {
		t.Error("a status table parsed as JSON")
	}
}

func TestImageListed(t *testing.T) {
	const ref = "tupper.local/rootfs:2f9c0d1e4b5a6978"
	tests := []struct {
		name, out string
		want      bool
	}{
		// ImageDescription of 0.x: reference and descriptor.
		{name: "0.x listed", out: `[{"reference":"docker.io\/library\/alpine:latest","descriptor":{"mediaType":"application\/vnd.oci.image.index.v1+json","digest":"sha256:aa","size":9218}},{"reference":"tupper.local\/rootfs:2f9c0d1e4b5a6978","descriptor":{"mediaType":"application\/vnd.oci.image.manifest.v1+json","digest":"sha256:bb","size":405}}]`, want: true},
		{name: "0.x not listed", out: `[{"reference":"docker.io\/library\/alpine:latest","descriptor":{"digest":"sha256:aa"}}]`},
		// A later, wrapped shape (an ImageResource with a name).
		{name: "wrapped", out: `[{"id":"sha256:bb","name":"tupper.local/rootfs:2f9c0d1e4b5a6978","configuration":{"descriptor":{"digest":"sha256:bb"}}}]`, want: true},
		{name: "empty", out: `[]`},
		{name: "another tag", out: `[{"reference":"tupper.local/rootfs:ffffffffffffffff"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := imageListed([]byte(tt.out), ref)
			if err != nil || got != tt.want {
				t.Errorf("imageListed = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	if _, err := imageListed([]byte("NAME TAG DIGEST"), ref); err == nil {
		t.Error("a table parsed as JSON")
	}
}
