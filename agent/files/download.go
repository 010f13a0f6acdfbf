package files

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"syscall"

	"github.com/lightbearco/tupper/agent/asuser"
	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
)

// download serves GET /files?path=…: the file's raw bytes, streamed from
// disk, as application/octet-stream with its length and its name in
// Content-Disposition. Range and conditional requests work (http.ServeContent
// handles them). The body is gzip-compressed only when the client ranks gzip
// above identity (see wantsGzip); then it has no Content-Length.
//
// The file is opened as the request's user (asuser.Do), so a user downloads
// only what that user may read, through links or not; the bytes are then
// served from the open file.
//
// Errors: a missing path is 404, a directory 400, a bad user, token or
// signature 401, a file the user may not read 403.
func (h *handler) download(w http.ResponseWriter, r *http.Request) {
	u, err := h.user(r, opRead)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p, err := u.ResolvePath(r.URL.Query().Get("path"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	f, err := openAs(u, p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if st.IsDir() {
		h.fail(w, r, fmt.Errorf("%s is a directory: %w", p, errdefs.ErrInvalidArgument))
		return
	}
	if !st.Mode().IsRegular() {
		// A FIFO or device would block or never end.
		h.fail(w, r, fmt.Errorf("%s is not a regular file: %w", p, errdefs.ErrInvalidArgument))
		return
	}

	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	// FormatMediaType quotes the name, or RFC 2231-encodes it when it is
	// not ASCII; it returns "" only for names it cannot carry at all.
	if cd := mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(p)}); cd != "" {
		hd.Set("Content-Disposition", cd)
	}
	hd.Set("Vary", "Accept-Encoding")
	// Ranges address the file's own bytes, so they are always served
	// uncompressed.
	if r.Header.Get("Range") == "" && wantsGzip(r.Header.Get("Accept-Encoding")) {
		hd.Set("Content-Encoding", "gzip")
		hd.Set("Last-Modified", st.ModTime().UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return
		}
		gz := gzip.NewWriter(w)
		// Once the status is out a failure can only cut the stream short;
		// gzip's trailer is then missing, which the client detects.
		if _, err := io.Copy(gz, f); err != nil {
			h.log.Warn("download cut short", "path", p, "err", err)
			return
		}
		gz.Close()
		return
	}
	// ServeContent streams with io.CopyN (sendfile where the connection
	// allows it) and sets Content-Length.
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// openAs opens p for reading with u's credentials. Non-blocking and no
// controlling terminal: opening a FIFO for reading would otherwise wait for a
// writer for ever, and a tty could become the agent's. Regular files ignore
// O_NONBLOCK.
func openAs(u *identity.User, p string) (f *os.File, err error) {
	err = asuser.Do(u, func() (err error) {
		f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
		return err
	})
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("user %q may not read %s: %w", u.Name, p, err)
	}
	return f, err
}
