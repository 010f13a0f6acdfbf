// Package proto holds the .proto sources of the envd services that the
// in-sandbox agent serves. The generated Go code sits beside each source and
// is committed; run `go generate ./proto` after changing a .proto file
// (scripts/gen-proto.sh installs the pinned generators).
package proto

//go:generate ../scripts/gen-proto.sh

// EnvdVersion is the envd protocol version the agent implements. The E2B
// SDKs gate features on it (0.4.0 server-side default user, 0.5.2
// CloseStdin, 0.5.7 octet-stream uploads...), so it is the highest version
// whose features all work.
const EnvdVersion = "0.5.7"
