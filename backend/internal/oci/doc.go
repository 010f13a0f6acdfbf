// Package oci holds what the backends that drive an OCI runtime on the host
// (gVisor's runsc, runc) share: cgroup sweeping, mount peeling, bundle
// removal, state files and per-id locks.
package oci
