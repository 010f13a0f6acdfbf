package gvisor

import "github.com/lightbearco/tupper/backend"

// The sandboxes' network (withheld, updated, observed) is oci.Runtime's.
var (
	_ backend.NetworkUpdater  = (*Backend)(nil)
	_ backend.NetworkObserver = (*Backend)(nil)
	_ backend.Waiter          = (*Backend)(nil)
)
