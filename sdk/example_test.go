package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/lightbearco/tupper/sdk"
)

// These examples need a Tupper endpoint (DefaultClient.Transport set, for
// example by package local), so they are compiled but not run.

func Example() {
	ctx := context.Background()
	sb, err := sdk.Create(ctx, sdk.CreateOptions{Template: "base", Timeout: 10 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)

	res, err := sb.Commands.Run(ctx, "python3 -c 'print(6*7)'")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
}

func ExampleClient_Create() {
	ctx := context.Background()
	var c sdk.Client // set c.Transport, e.g. to the in-process engine
	sb, err := c.Create(ctx, sdk.CreateOptions{
		Metadata: map[string]string{"task": "build"},
		Envs:     map[string]string{"CI": "1"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sandbox", sb.ID())
}

func ExampleCommands_Run() {
	ctx := context.Background()
	sb, err := sdk.Connect(ctx, "sandbox-id")
	if err != nil {
		log.Fatal(err)
	}
	res, err := sb.Commands.Run(ctx, "ls -l $DIR && exit 3",
		sdk.WithEnv(map[string]string{"DIR": "/etc"}),
		sdk.WithCwd("/tmp"),
		sdk.WithUser("root"),
		sdk.WithTimeout(30*time.Second),
		sdk.WithOnStdout(func(s string) { fmt.Print(s) }),
	)
	var exit *sdk.CommandExitError
	if errors.As(err, &exit) {
		fmt.Println("exit code", exit.ExitCode) // res holds the same result
	} else if err != nil {
		log.Fatal(err)
	}
	_ = res
}

func ExampleCommands_Start() {
	ctx := context.Background()
	sb, err := sdk.Connect(ctx, "sandbox-id")
	if err != nil {
		log.Fatal(err)
	}
	// A server in the background, with no time limit.
	h, err := sb.Commands.Start(ctx, "python3 -m http.server 8000",
		sdk.WithTimeout(0), sdk.WithTag("web"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pid", h.PID())
	h.Disconnect() // stop following it; it keeps running

	// Later, perhaps from another program:
	h, err = sb.Commands.ConnectTag(ctx, "web")
	if err != nil {
		log.Fatal(err)
	}
	if err := h.Kill(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = h.Wait(ctx) // a *CommandExitError: the process was killed
	fmt.Println(err)
}

func ExampleFiles() {
	ctx := context.Background()
	sb, err := sdk.Connect(ctx, "sandbox-id")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Files.Write(ctx, "/home/user/data/hello.txt", []byte("hello\n")); err != nil {
		log.Fatal(err)
	}
	b, err := sb.Files.Read(ctx, "data/hello.txt") // relative to the user's home
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(b))

	entries, err := sb.Files.List(ctx, "/home/user/data", 1)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.Type, e.Path, e.Size)
	}

	if _, err := sb.Files.Read(ctx, "/no/such/file"); sdk.IsNotFound(err) {
		fmt.Println("not there")
	}
}

func ExampleFiles_WriteStream() {
	ctx := context.Background()
	sb, err := sdk.Connect(ctx, "sandbox-id")
	if err != nil {
		log.Fatal(err)
	}
	f, err := os.Open("dataset.csv")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	// Streamed: the file is never held in memory whole.
	if _, err := sb.Files.WriteStream(ctx, "/home/user/dataset.csv", f); err != nil {
		log.Fatal(err)
	}
	_, err = sb.Files.WriteMany(ctx, []sdk.WriteEntry{
		{Path: "/home/user/app/main.py", Data: []byte("print('hi')\n")},
		{Path: "/home/user/app/README", Reader: strings.NewReader("docs")},
	})
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleFiles_Watch() {
	ctx := context.Background()
	sb, err := sdk.Connect(ctx, "sandbox-id")
	if err != nil {
		log.Fatal(err)
	}
	w, err := sb.Files.Watch(ctx, "/home/user", sdk.WatchOptions{Recursive: true})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.Events() {
		fmt.Println(ev.Type, ev.Name)
	}
}

func ExamplePTY_Create() {
	ctx := context.Background()
	sb, err := sdk.Connect(ctx, "sandbox-id")
	if err != nil {
		log.Fatal(err)
	}
	term, err := sb.PTY.Create(ctx, sdk.PTYOptions{
		Cols: 80, Rows: 24,
		OnData:  func(b []byte) { os.Stdout.Write(b) },
		Timeout: -1, // no time limit
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = sb.PTY.SendInput(ctx, term.PID(), []byte("ls\n"))
	_ = sb.PTY.Resize(ctx, term.PID(), 120, 40)
	_ = sb.PTY.SendInput(ctx, term.PID(), []byte("exit\n"))
	_, _ = term.Wait(ctx)
}

func ExampleSandbox_DownloadURL() {
	ctx := context.Background()
	sb, err := sdk.Connect(ctx, "sandbox-id")
	if err != nil {
		log.Fatal(err)
	}
	u, err := sb.DownloadURL("/home/user/report.pdf", sdk.URLOptions{Expires: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(u) // fetch it with no other credentials
}
