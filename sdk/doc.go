// Package sdk is the Go SDK of Tupper, shaped like the E2B SDKs: create a
// sandbox, run commands in it, read and write its files, drive terminals.
//
//	sb, err := sdk.Create(ctx, sdk.CreateOptions{})
//	res, err := sb.Commands.Run(ctx, "python3 -c 'print(6*7)'")
//	_, err = sb.Files.Write(ctx, "/home/user/hello.txt", []byte("hi"))
//
// A Client reaches Tupper through a Transport: the in-process engine
// (package local) or a remote `tupper serve`. Commands, files and
// terminals always go to the sandbox's agent over the envd protocol
// (Connect RPC with the JSON encoding, and plain HTTP for /files), the same
// protocol the E2B SDKs speak.
//
// Errors wrap the classes of package errdefs: check them with errors.Is or
// with the IsX helpers of this package (IsNotFound, IsAlreadyExists…). A
// command that exits non-zero returns its result and a *CommandExitError.
//
// This package must stay light: it never imports the engine, a backend,
// the agent or the server (a test enforces it).
package sdk
