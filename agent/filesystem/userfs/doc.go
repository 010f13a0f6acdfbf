// Package userfs changes the sandbox's filesystem on behalf of a sandbox
// user: it creates directories and writes files as that user, writes files
// atomically (a half-written upload never replaces a file), and sorts
// operating-system errors into errdefs classes so that each edge (Connect,
// HTTP) maps them to wire codes in one place.
//
// The agent runs as root, but every change here is made with the user's own
// credentials (asuser.Do): the kernel decides what the user may change, as
// it would for the user's processes, and a symbolic link the user's code
// planted leads nowhere the user could not write already. What is created
// belongs to the user because the user creates it; nothing is chowned.
package userfs
