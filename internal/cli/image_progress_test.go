package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/progress"
)

// TestImageProgress feeds the events of a pull and of a build to
// imageProgress and checks the lines a script reads: their fields (values
// unquoted), without the times.
func TestImageProgress(t *testing.T) {
	const (
		l1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
		l2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	)
	tests := []struct {
		name   string
		events []image.Event
		want   []string
		raw    string
	}{
		{
			name: "pull",
			events: []image.Event{
				{Phase: image.PhaseResolve, Item: "tools:1", Message: "resolving tools"},
				// Both layers are announced before the first moves.
				{Phase: image.PhaseDownload, Item: l1, Total: 3 << 20},
				{Phase: image.PhaseDownload, Item: l2, Total: 1 << 20},
				{Phase: image.PhaseDownload, Item: l1, Current: 1 << 20, Total: 3 << 20},
				{Phase: image.PhaseDownload, Item: l2, Current: 1 << 20, Total: 1 << 20, Done: true},
				{Phase: image.PhaseDownload, Item: l1, Current: 3 << 20, Total: 3 << 20, Done: true},
				{Phase: image.PhaseUnpack, Item: "sha256:chain", Message: "already unpacked"},
				{Phase: image.PhaseDone, Item: "tools:1", Message: "sha256:abc"},
			},
			want: []string{
				"event=start",
				"event=note message=resolving tools",
				"event=update detail=download bytes=1048576/4194304",
				"event=part detail=download bytes=1048576 part=222222222222",
				"event=update detail=download bytes=4194304/4194304",
				"event=part detail=download bytes=3145728 part=111111111111",
				"event=note message=already unpacked",
			},
		},
		{
			name: "build",
			events: []image.Event{
				{Phase: image.PhaseBuild, Item: "base", Message: "I: installing remaining packages inside the chroot..."},
				{Phase: image.PhaseStep, Item: "base", Current: 5, Total: 11, Message: "install packages", Fraction: 0.25},
				{Phase: image.PhasePackages, Item: "base", Current: 1, Total: 30, Message: "fetched", Fraction: 0.26},
				{Phase: image.PhaseBuild, Item: "base", Message: "Get:1 http://deb.debian.org/debian bookworm/main amd64 apt"},
				{Phase: image.PhaseStep, Item: "base", Current: 11, Total: 11, Message: "unpack the image", Fraction: 0.95},
				{Phase: image.PhaseDownload, Item: l1, Done: true, Message: "already present"},
				{Phase: image.PhaseUnpack, Item: l1, Total: 2 << 20},
				{Phase: image.PhaseUnpack, Item: l1, Current: 2 << 20, Total: 2 << 20, Done: true},
			},
			want: []string{
				"event=start",
				`event=step step=5/11 name=install packages`,
				`event=update step=5/11 name=install packages detail=fetched packages=1/30`,
				`event=step step=11/11 name=unpack the image`,
				// A build's layer is always present: nothing said.
				`event=update step=11/11 name=unpack the image detail=unpack bytes=2097152/2097152`,
				`event=part step=11/11 name=unpack the image detail=unpack bytes=2097152 part=111111111111`,
			},
			raw: "I: installing remaining packages inside the chroot...\nGet:1 http://deb.debian.org/debian bookworm/main amd64 apt\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, raw bytes.Buffer
			task := progress.New(&out, progress.Plain).Start("op", "it")
			ip := &imageProgress{task: task, raw: &raw}
			for _, e := range tc.events {
				ip.Event(e)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				fields, err := progress.ParseLine(line)
				if err != nil {
					t.Fatalf("line %q: %v", line, err)
				}
				var kept []string
				for _, f := range fields {
					switch f.Key {
					case "op", "item", "elapsed", "rate", "eta":
					default:
						kept = append(kept, f.Key+"="+f.Value)
					}
				}
				got = append(got, strings.Join(kept, " "))
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("lines (-want +got):\n%s", d)
			}
			if raw.String() != tc.raw {
				t.Errorf("raw log %q, want %q", raw.String(), tc.raw)
			}
		})
	}
}
