package image

// An image built from a template carries the limits its template asks
// for: sandboxes created from it without limits of their own get them.
const (
	LabelCPUs     = "dev.tupper.cpus"
	LabelMemoryMB = "dev.tupper.memory-mb"
)
