package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// LayerFilter decides, for each file of a sandbox's changes, whether it
// goes into the layer, and may change its content: files the agent wrote
// for the sandbox's own network (its resolver, its hosts, the egress CA)
// belong to that sandbox, not to an image made of it. It gets the clean
// path ("etc/hosts") and, for regular files, their content; it returns
// false to leave the file out, and the content to write.
type LayerFilter func(name string, content []byte) (keep bool, out []byte)

// maxFilteredFile bounds the files a LayerFilter sees whole; larger ones
// go in as they are.
const maxFilteredFile = 16 << 20

// LayerFromOverlay copies a tar of an overlayfs upper layer (as `runsc tar
// rootfs-upper` writes it, or as the upper directory of a host overlay
// holds it) to w as an OCI image layer: a deleted file, which overlayfs
// keeps as a 0/0 character device, becomes a ".wh.<name>" file, and a
// directory marked opaque ("trusted.overlay.opaque" = "y") gets a
// ".wh..wh..opq" file, and overlayfs's own attributes are dropped. filter
// (when set) sees every regular file of at most 16 MiB.
func LayerFromOverlay(r io.Reader, w io.Writer, filter LayerFilter) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	// whiteouts and dropped name the entries that became whiteouts or were
	// left out: a hard link to one of them (runsc links the whiteouts that
	// share an inode) is one too, or goes as well.
	whiteouts, dropped := map[string]bool{}, map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read the sandbox's changes: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if name == "." || name == "/" || strings.HasPrefix(name, "../") {
			continue
		}
		name = strings.TrimPrefix(name, "/")
		out := *hdr
		out.Name = name
		out.Format = tar.FormatPAX
		out.Xattrs = nil //nolint:staticcheck // PAXRecords carry the same, filtered below
		link := path.Clean(strings.TrimPrefix(strings.TrimPrefix(hdr.Linkname, "./"), "/"))
		switch {
		case hdr.Typeflag == tar.TypeLink && dropped[link]:
			dropped[name] = true
			continue
		case hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0,
			hdr.Typeflag == tar.TypeLink && whiteouts[link]:
			whiteouts[name] = true
			out = tar.Header{Typeflag: tar.TypeReg, Name: path.Join(path.Dir(name), ".wh."+path.Base(name)), Mode: 0o644, ModTime: whiteoutTime, Format: tar.FormatPAX}
			if err := tw.WriteHeader(&out); err != nil {
				return err
			}
			continue
		case hdr.Typeflag == tar.TypeDir:
			opaque := isOpaque(hdr)
			out.Name = name + "/"
			out.PAXRecords = withoutOverlayXattrs(hdr.PAXRecords)
			if err := tw.WriteHeader(&out); err != nil {
				return err
			}
			if opaque {
				wh := tar.Header{Typeflag: tar.TypeReg, Name: name + "/.wh..wh..opq", Mode: 0o644, ModTime: whiteoutTime, Format: tar.FormatPAX}
				if err := tw.WriteHeader(&wh); err != nil {
					return err
				}
			}
			continue
		case hdr.Typeflag == tar.TypeReg && filter != nil && hdr.Size <= maxFilteredFile:
			content, err := io.ReadAll(tr)
			if err != nil {
				return fmt.Errorf("read %s: %w", name, err)
			}
			keep, data := filter(name, content)
			if !keep {
				dropped[name] = true
				continue
			}
			out.Size = int64(len(data))
			out.PAXRecords = withoutOverlayXattrs(hdr.PAXRecords)
			if err := tw.WriteHeader(&out); err != nil {
				return err
			}
			if _, err := io.Copy(tw, bytes.NewReader(data)); err != nil {
				return err
			}
			continue
		}
		out.PAXRecords = withoutOverlayXattrs(hdr.PAXRecords)
		if err := tw.WriteHeader(&out); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("copy %s: %w", name, err)
			}
		}
	}
	return tw.Close()
}

// whiteoutTime is the time of every whiteout file: one that means the same
// must look the same, whenever it was made.
var whiteoutTime = time.Unix(0, 0)

// overlayXattrs start the extended attributes that are overlayfs's own
// bookkeeping, kept in tar as PAX records.
var overlayXattrs = []string{"SCHILY.xattr.trusted.overlay.", "SCHILY.xattr.user.overlay."}

func isOpaque(hdr *tar.Header) bool {
	for k, v := range hdr.PAXRecords {
		for _, p := range overlayXattrs {
			if k == p+"opaque" && (v == "y" || v == "x") {
				return true
			}
		}
	}
	return false
}

func withoutOverlayXattrs(recs map[string]string) map[string]string {
	var out map[string]string
	for k, v := range recs {
		skip := false
		for _, p := range overlayXattrs {
			skip = skip || strings.HasPrefix(k, p)
		}
		if skip {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// The files an agent writes for its sandbox alone (agent/netconf): they
// never go into an image made of the sandbox.
var (
	sandboxOwnFiles = map[string]bool{
		"etc/resolv.conf": true,
		"etc/hosts":       true,
		"usr/local/share/ca-certificates/tupper-egress.crt": true,
	}
	// trustBundles get the egress CA appended; an image keeps the rest.
	trustBundles = map[string]bool{
		"etc/ssl/certs/ca-certificates.crt": true,
		"etc/pki/tls/certs/ca-bundle.crt":   true,
		"etc/ssl/cert.pem":                  true,
	}
)

// SandboxFilesFilter is the LayerFilter that leaves out the files an agent
// wrote for its sandbox, and takes caPEM (the egress CA the agent trusts;
// nil for none) out of the system's trust bundles.
func SandboxFilesFilter(caPEM []byte) LayerFilter {
	ca := bytes.TrimSpace(caPEM)
	return func(name string, content []byte) (bool, []byte) {
		if sandboxOwnFiles[name] {
			return false, nil
		}
		if trustBundles[name] && len(ca) > 0 {
			if i := bytes.Index(content, ca); i >= 0 {
				out := append(bytes.Clone(content[:i]), content[i+len(ca):]...)
				// The agent appended the CA with a newline of its own.
				out = bytes.Replace(out, []byte("\n\n"), []byte("\n"), 1)
				return true, out
			}
		}
		return true, content
	}
}
