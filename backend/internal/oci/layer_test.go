package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestLayerFromOverlay(t *testing.T) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	ca := "-----BEGIN CERTIFICATE-----\nTUPPER\n-----END CERTIFICATE-----"
	bundle := "-----BEGIN CERTIFICATE-----\nDEBIAN\n-----END CERTIFICATE-----\n" + ca + "\n"
	for _, e := range []struct {
		hdr  tar.Header
		body string
	}{
		{tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}, ""},
		{tar.Header{Name: "./etc/", Typeflag: tar.TypeDir, Mode: 0o755}, ""},
		{tar.Header{Name: "./etc/gone", Typeflag: tar.TypeChar}, ""},
		{tar.Header{Name: "./etc/gone-too", Typeflag: tar.TypeLink, Linkname: "./etc/gone"}, ""},
		{tar.Header{Name: "./etc/hosts", Typeflag: tar.TypeReg, Mode: 0o644}, "10.0.0.2 sb\n"},
		{tar.Header{Name: "./etc/hosts-link", Typeflag: tar.TypeLink, Linkname: "./etc/hosts"}, ""},
		{tar.Header{Name: "./etc/ssl/certs/ca-certificates.crt", Typeflag: tar.TypeReg, Mode: 0o644}, bundle},
		{tar.Header{Name: "./var/cache/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: map[string]string{"SCHILY.xattr.trusted.overlay.opaque": "y"}}, ""},
		{tar.Header{Name: "./var/cache/x", Typeflag: tar.TypeReg, Mode: 0o600}, "x"},
	} {
		e.hdr.Size = int64(len(e.body))
		e.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&e.hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()

	var out bytes.Buffer
	if err := LayerFromOverlay(&in, &out, SandboxFilesFilter([]byte(ca+"\n"))); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&out)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := hdr.PAXRecords["SCHILY.xattr.trusted.overlay.opaque"]; ok {
			t.Errorf("%s keeps overlayfs's attribute", hdr.Name)
		}
		b, _ := io.ReadAll(tr)
		got[hdr.Name] = string(b)
	}
	want := map[string]string{
		"etc/":                              "",
		"etc/.wh.gone":                      "",
		"etc/.wh.gone-too":                  "",
		"etc/ssl/certs/ca-certificates.crt": "-----BEGIN CERTIFICATE-----\nDEBIAN\n-----END CERTIFICATE-----\n",
		"var/cache/":                        "",
		"var/cache/.wh..wh..opq":            "",
		"var/cache/x":                       "x",
	}
	for name, body := range want {
		if g, ok := got[name]; !ok || g != body {
			t.Errorf("%s: %q (present %v), want %q", name, g, ok, body)
		}
	}
	if _, ok := got["etc/hosts"]; ok {
		t.Error("the sandbox's hosts file went into the layer")
	}
	if len(got) != len(want) {
		t.Errorf("entries %v, want exactly %v", got, want)
	}
}
