package sdk_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/lightbearco/tupper/sdk"
)

// These examples need a Tupper endpoint and a sandbox of the
// code-interpreter template, so they are compiled but not run.

func ExampleSandbox_RunCode() {
	ctx := context.Background()
	sb, err := sdk.Create(ctx, sdk.CreateOptions{Template: "code-interpreter"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)

	// State carries over between cells, as in a notebook.
	if _, err := sb.RunCode(ctx, "x = 41"); err != nil {
		log.Fatal(err)
	}
	exec, err := sb.RunCode(ctx, "x + 1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(exec.Text()) // 42

	// Plots come back as PNG images; output streams as it comes.
	exec, err = sb.RunCode(ctx, "import matplotlib.pyplot as plt\nprint('plotting')\nplt.plot([1, 2, 3])\nplt.show()",
		sdk.WithOnCodeStdout(func(s string) { fmt.Print(s) }),
		sdk.WithCodeTimeout(2*time.Minute),
	)
	if err != nil {
		log.Fatal(err)
	}
	if exec.Error != nil {
		log.Fatalf("the cell failed: %v\n%s", exec.Error, exec.Error.Traceback)
	}
	for i, r := range exec.Results {
		if len(r.PNG) > 0 {
			os.WriteFile(fmt.Sprintf("plot-%d.png", i), r.PNG, 0o644)
		}
	}
}

func ExampleSandbox_CreateCodeContext() {
	ctx := context.Background()
	sb, err := sdk.Connect(ctx, "sandbox-id")
	if err != nil {
		log.Fatal(err)
	}
	cc, err := sb.CreateCodeContext(ctx, sdk.CodeContextOptions{Language: sdk.LanguageJavaScript, Cwd: "/tmp"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.RemoveCodeContext(ctx, cc.ID)

	exec, err := sb.RunCode(ctx, "const fs = require('fs'); fs.readdirSync('.').length", sdk.WithCodeContext(cc.ID))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("files in /tmp:", exec.Text())
}
