//go:build !linux

package filesystem

// isNetworkMount reports false: outside Linux the agent does not run in
// sandboxes, and there is no portable way to tell.
func isNetworkMount(string) (bool, error) { return false, nil }
