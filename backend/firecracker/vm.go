package firecracker

import (
	"math"
	"slices"
	"strconv"

	"github.com/lightbearco/tupper/backend"
)

// vcpus is the microVM's vCPU count for a quota of cpus cores: enough
// vCPUs to use the quota, which the VMM's cgroup then holds.
func vcpus(cpus float64) int { return min(max(int(math.Ceil(cpus)), 1), maxVCPUs) }

// memMiB is the microVM's memory size in MiB, rounded up.
func memMiB(bytes int64) int64 { return (bytes + 1<<20 - 1) >> 20 }

// agentArgs are the agent's arguments in the guest: the spec's, and the
// vsock ports the host reaches it on.
func agentArgs(spec *backend.Spec) []string {
	return append(slices.Clone(spec.Agent.Args),
		"--vsock-port", strconv.Itoa(AgentVsockPort),
		"--vsock-forward-port", strconv.Itoa(ForwardVsockPort))
}
