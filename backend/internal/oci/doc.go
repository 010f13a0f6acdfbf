// Package oci holds what the backends that drive an OCI runtime on the host
// (gVisor's runsc, runc) share: the frame of a Start (Boot), the runtime's
// state, stop, pause and stats (Runtime), the sandboxes' network, cgroup
// sweeping, mount peeling, bundle removal and state files. The Firecracker
// backend uses its cgroup and file helpers too.
package oci
