// Package sdk is the Go SDK of Tupper, shaped like the E2B SDKs: create a
// sandbox, run commands in it, read and write its files, drive terminals.
//
//	sb, err := sdk.Create(ctx, sdk.CreateOptions{})
//	res, err := sb.Commands.Run(ctx, "python3 -c 'print(6*7)'")
//	_, err = sb.Files.Write(ctx, "/home/user/hello.txt", []byte("hi"))
//
// Sandboxes of the code-interpreter template also run code in stateful
// contexts, as E2B's code interpreter does: Sandbox.RunCode returns an
// Execution with the cell's rich results (text, HTML, PNG plots…), its
// output and its error, and streams them to callbacks as they come;
// CreateCodeContext and its siblings manage contexts of Python,
// JavaScript, TypeScript or bash.
//
//	exec, err := sb.RunCode(ctx, "import pandas as pd; pd.DataFrame({'a': [1, 2]})")
//	fmt.Println(exec.Text(), exec.MainResult().HTML)
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
