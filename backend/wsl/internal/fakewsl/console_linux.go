package main

import (
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/lightbearco/tupper/backend/internal/oci"
)

// relayConsole copies what the sandbox's processes print (the runc
// backend's console log of sandbox id) to stdout while it grows, as
// wsl.exe relays what the command prints. The returned function stops it
// after a last copy.
func relayConsole(id string) (stop func()) {
	path := oci.ConsolePath(filepath.Join(vmDir(), "sandboxes", id))
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var f *os.File
		defer func() {
			if f != nil {
				f.Close()
			}
		}()
		for {
			if f == nil {
				f, _ = os.Open(path)
			}
			if f != nil {
				io.Copy(os.Stdout, f)
			}
			select {
			case <-done:
				if f != nil {
					io.Copy(os.Stdout, f)
				}
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
