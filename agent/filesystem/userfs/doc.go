// Package userfs changes the sandbox's filesystem on behalf of a sandbox
// user: it creates directories and writes files owned by that user, writes
// files atomically (a half-written upload never replaces a file), and sorts
// operating-system errors into errdefs classes so that each edge (Connect,
// HTTP) maps them to wire codes in one place.
//
// The agent runs as root, so nothing here checks whether the user may make a
// change: as in envd, the sandbox belongs to its one tenant, and the user
// only decides who owns what gets created.
package userfs
