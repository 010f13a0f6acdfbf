package gvisor

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

func TestExportChangesIsAnOCILayer(t *testing.T) {
	b := newTestBackend(t)
	id := newID("export")
	sb := startSandbox(t, b, testSpec(id))
	mustRun(t, sb.AgentAddr, "mkdir -p /opt/app && echo hi > /opt/app/f && ln -s f /opt/app/link && rm /bin/true && echo ns > /etc/resolv.conf")
	var buf bytes.Buffer
	if err := b.ExportChanges(context.Background(), id, &buf); err != nil {
		t.Fatal(err)
	}
	entries := map[string]*tar.Header{}
	contents := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[hdr.Name] = hdr
		data, _ := io.ReadAll(tr)
		contents[hdr.Name] = string(data)
	}
	if contents["opt/app/f"] != "hi\n" {
		t.Errorf("opt/app/f: %q (entries %v)", contents["opt/app/f"], keys(entries))
	}
	if h := entries["opt/app/link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "f" {
		t.Errorf("opt/app/link: %+v", h)
	}
	if h := entries["bin/.wh.true"]; h == nil || h.Typeflag != tar.TypeReg {
		t.Errorf("the deletion of /bin/true is no whiteout file: %v", keys(entries))
	}
	if _, ok := entries["etc/resolv.conf"]; ok {
		t.Error("the sandbox's own resolv.conf went into the layer")
	}
	for name, h := range entries {
		if h.Typeflag == tar.TypeChar {
			t.Errorf("%s: an overlay whiteout device is left in the layer", name)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
