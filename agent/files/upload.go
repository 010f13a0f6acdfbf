package files

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/lightbearco/tupper/agent/filesystem/userfs"
	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
)

// uploadedEntry is one element of the upload's reply, the shape envd
// returns.
type uploadedEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// upload serves POST /files. The body is either
//
//   - multipart/form-data, each part named "file" one file: its target is
//     the path query parameter when given (as envd does; the SDKs send it
//     for single-file writes), else the part's filename, read raw from its
//     Content-Disposition because the SDKs put the full target path there
//     and multipart.Part.FileName drops directories. A relative name
//     resolves against the user's home. Two parts may not name the same
//     target. Parts with other names are skipped.
//   - application/octet-stream: the body is the file, path is required.
//
// Either may be sent with Content-Encoding: gzip. Each file streams to disk
// and replaces its target atomically (userfs.WriteFile), so a body cut short
// fails with 400 and a full disk with 507, and neither leaves a partial file
// or disturbs the old one. A path the user may not write (through a link or
// not) is 403. Files that a multipart body finished before a later part
// failed stay written. The reply is 200 with
// [{"name","type":"file","path"}] for every file written.
func (h *handler) upload(w http.ResponseWriter, r *http.Request) {
	u, err := h.user(r, opWrite)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	body, err := decodedBody(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer body.Close()

	mediaType, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var written []uploadedEntry
	switch {
	case mediaType == "application/octet-stream":
		written, err = h.uploadRaw(r, body, u)
	case strings.HasPrefix(mediaType, "multipart/") && params["boundary"] != "":
		// multipart.Reader refills its own 4 KiB buffer with one read
		// of what it is given. Given the body itself, every refill was a
		// read of the connection, a system call that gVisor makes
		// expensive: 64 MiB took 16,000 of them and moved at 33 MB/s,
		// where the same file sent as application/octet-stream moved at
		// 220 MB/s. The E2B JS SDK sends every files.write of bytes or
		// text as multipart. Refilled from a large buffer, it copies
		// memory instead.
		br := bufio.NewReaderSize(body, multipartBufferSize)
		written, err = h.uploadMultipart(r, multipart.NewReader(br, params["boundary"]), u)
	default:
		err = fmt.Errorf("content type %q: want multipart/form-data or application/octet-stream: %w",
			r.Header.Get("Content-Type"), errdefs.ErrNotSupported)
	}
	if err != nil {
		drain(r.Body)
		h.fail(w, r, err)
		return
	}
	if written == nil {
		written = []uploadedEntry{}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(written)
}

// multipartBufferSize is the buffer a multipart upload is parsed from. It
// matches userfs's write blocks, so that a part's data reaches the file in
// about as few system calls as a raw upload's.
const multipartBufferSize = 1 << 20

// maxDrain is how much of an upload's unread body the handler reads and
// discards after a failure before it answers.
const maxDrain = 64 << 20

// drain discards what is left of a failed upload's body, up to maxDrain.
// Answering while the client is still sending makes the server close the
// connection with data unread, and the resulting reset can reach the client
// before the error reply does: it would see "connection reset" instead of,
// say, 507 "not enough disk space". Over the loopback-fast path from the
// daemon, discarding tens of MiB takes milliseconds.
func drain(body io.Reader) {
	io.Copy(io.Discard, io.LimitReader(body, maxDrain))
}

// decodedBody returns r's body with its Content-Encoding undone. Only gzip
// (and identity) is understood.
func decodedBody(r *http.Request) (io.ReadCloser, error) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return r.Body, nil
	case "gzip", "x-gzip":
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, &userfs.ReadError{Err: fmt.Errorf("gzip body: %w", err)}
		}
		return gz, nil
	default:
		return nil, fmt.Errorf("content encoding %q: only gzip is supported: %w", enc, errdefs.ErrNotSupported)
	}
}

func (h *handler) uploadRaw(r *http.Request, body io.Reader, u *identity.User) ([]uploadedEntry, error) {
	if r.URL.Query().Get("path") == "" {
		return nil, fmt.Errorf("path query parameter is required for an application/octet-stream upload: %w", errdefs.ErrInvalidArgument)
	}
	e, err := h.write(r.URL.Query().Get("path"), body, u)
	if err != nil {
		return nil, err
	}
	return []uploadedEntry{e}, nil
}

func (h *handler) uploadMultipart(r *http.Request, mr *multipart.Reader, u *identity.User) ([]uploadedEntry, error) {
	queryPath := r.URL.Query().Get("path")
	var written []uploadedEntry
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return written, nil
		}
		if err != nil {
			return written, &userfs.ReadError{Err: fmt.Errorf("multipart body: %w", err)}
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		target := queryPath
		if target == "" {
			target = rawFileName(part)
		}
		if target == "" {
			part.Close()
			return written, fmt.Errorf("part %d names no file: give its full path as the filename or set the path query parameter: %w",
				len(written)+1, errdefs.ErrInvalidArgument)
		}
		abs, err := u.ResolvePath(target)
		if err != nil {
			part.Close()
			return written, err
		}
		for _, e := range written {
			if e.Path == abs {
				part.Close()
				return written, fmt.Errorf("two parts target %s; only the first was written: %w", abs, errdefs.ErrInvalidArgument)
			}
		}
		e, err := h.write(abs, part, u)
		part.Close()
		if err != nil {
			return written, err
		}
		written = append(written, e)
	}
}

// rawFileName returns the filename of a part's Content-Disposition as sent,
// directories included.
func rawFileName(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// write streams r to path (resolved for u) and describes the result.
func (h *handler) write(path string, r io.Reader, u *identity.User) (uploadedEntry, error) {
	abs, err := u.ResolvePath(path)
	if err != nil {
		return uploadedEntry{}, err
	}
	n, err := userfs.WriteFile(abs, r, u)
	if err != nil {
		return uploadedEntry{}, err
	}
	h.log.Debug("file written", "path", abs, "bytes", n, "user", u.Name)
	return uploadedEntry{Name: filepath.Base(abs), Type: "file", Path: abs}, nil
}
