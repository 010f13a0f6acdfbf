package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
)

// WriteEntry is one file of Files.WriteMany: its content is Data, or read
// from Reader when Reader is set.
type WriteEntry struct {
	Path   string
	Data   []byte
	Reader io.Reader
}

// Read returns the content of the file at path. A missing file is an error
// of class errdefs.ErrNotFound; a directory one of errdefs.ErrInvalidArgument.
func (f *Files) Read(ctx context.Context, path string, opts ...FileOption) ([]byte, error) {
	rc, err := f.ReadStream(ctx, path, opts...)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", path, fromTransport(err))
	}
	return b, nil
}

// ReadStream opens the file at path for streaming. ctx bounds the whole
// read, not only the open; the caller must close the reader.
func (f *Files) ReadStream(ctx context.Context, path string, opts ...FileOption) (io.ReadCloser, error) {
	o := newFileOptions(opts)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.c.filesURL(fileQuery(path, o.user)), nil)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", path, err)
	}
	resp, err := f.c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", path, fromTransport(err))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, fmt.Errorf("read %q: %w", path, fromResponse(resp))
	}
	return resp.Body, nil
}

// Write writes data to the file at path, creating it and its missing parent
// directories, and replacing what was there.
func (f *Files) Write(ctx context.Context, path string, data []byte, opts ...FileOption) (*WriteInfo, error) {
	return f.write(ctx, path, bytes.NewReader(data), opts)
}

// WriteStream writes what r yields to the file at path, like Write. The
// content is streamed: it is never held in memory whole. WriteStream does
// not close r.
func (f *Files) WriteStream(ctx context.Context, path string, r io.Reader, opts ...FileOption) (*WriteInfo, error) {
	// Hide any Close method of r: the HTTP client closes request bodies,
	// and r belongs to the caller.
	return f.write(ctx, path, struct{ io.Reader }{r}, opts)
}

func (f *Files) write(ctx context.Context, path string, body io.Reader, opts []FileOption) (*WriteInfo, error) {
	o := newFileOptions(opts)
	if path == "" {
		return nil, fmt.Errorf("write: %w: empty path", errdefs.ErrInvalidArgument)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.c.filesURL(fileQuery(path, o.user)), body)
	if err != nil {
		return nil, fmt.Errorf("write %q: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	infos, err := f.upload(req)
	if err != nil {
		return nil, fmt.Errorf("write %q: %w", path, err)
	}
	if len(infos) == 0 {
		return &WriteInfo{Path: path, Type: FileTypeFile}, nil
	}
	return &infos[0], nil
}

// WriteMany writes several files in one request (a multipart upload whose
// parts carry the target paths). Contents are streamed; WriteMany does not
// close the entries' readers.
func (f *Files) WriteMany(ctx context.Context, files []WriteEntry, opts ...FileOption) ([]WriteInfo, error) {
	o := newFileOptions(opts)
	if len(files) == 0 {
		return nil, nil
	}
	for _, e := range files {
		if e.Path == "" {
			return nil, fmt.Errorf("write files: %w: empty path", errdefs.ErrInvalidArgument)
		}
	}
	q := url.Values{}
	if o.user != "" {
		q.Set("username", o.user)
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(writeParts(mw, files))
	}()
	// Whatever happens to the request, unblock the writer goroutine.
	defer pr.CloseWithError(errors.New("upload ended"))

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.c.filesURL(q), pr)
	if err != nil {
		return nil, fmt.Errorf("write files: %w", err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	infos, err := f.upload(req)
	if err != nil {
		return nil, fmt.Errorf("write files: %w", err)
	}
	return infos, nil
}

// writeParts writes one part per file, named "file" with the full target
// path as its file name, as envd expects.
func writeParts(mw *multipart.Writer, files []WriteEntry) error {
	for _, e := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, quoteEscaper.Replace(e.Path)))
		h.Set("Content-Type", "application/octet-stream")
		part, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		r := e.Reader
		if r == nil {
			r = bytes.NewReader(e.Data)
		}
		if _, err := io.Copy(part, r); err != nil {
			return err
		}
	}
	return mw.Close()
}

var quoteEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// upload sends a POST /files and decodes the list of written files.
func (f *Files) upload(req *http.Request) ([]WriteInfo, error) {
	resp, err := f.c.http.Do(req)
	if err != nil {
		return nil, fromTransport(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fromResponse(resp)
	}
	var infos []WriteInfo
	if err := json.NewDecoder(resp.Body).Decode(&infos); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("decode the agent's answer: %w", err)
	}
	return infos, nil
}

func fileQuery(path, user string) url.Values {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	return q
}
