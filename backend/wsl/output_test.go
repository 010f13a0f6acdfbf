package wsl

import (
	"errors"
	"testing"
	"unicode/utf16"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
)

// The samples below are built from the way wsl.exe prints, as read in
// microsoft/WSL: ListDistributionsHelper, Status and Version in
// src/windows/common/WslClient.cpp (the --verbose table's format is
// "%s %-<longest name + 4>s%-16s%s\n", its state words are not
// translated), and the message templates of
// localization/strings/en-US/Resources.resw. The translated labels stand
// for what a German or Chinese Windows prints; the parsers never read
// labels, so their exact wording does not matter. No Windows machine was
// at hand to capture real output.

const (
	sampleListVerbose = "  NAME              STATE           VERSION\r\n" +
		"* Ubuntu-24.04      Running         2\r\n" +
		"  tupper-abc123     Stopped         2\r\n" +
		"  docker-desktop    Installing      2\r\n" +
		"  Legacy            Stopped         1\r\n"
	// A header in another language (older releases translated it).
	sampleListVerboseDE = "  NAME              STATUS          VERSION\r\n" +
		"  tupper-abc123     Running         2\r\n" +
		"* Debian            Stopped         2\r\n"
	// A state word this backend does not know, with a space in it.
	sampleListVerboseOddState = "  NAME              STATE           VERSION\r\n" +
		"  tupper-abc123     Wird ausgeführt 2\r\n"
	sampleListQuiet   = "Ubuntu-24.04\r\ntupper-abc123\r\ndocker-desktop\r\n"
	sampleVersionEN   = "WSL version: 2.3.26.0\r\nKernel version: 5.15.167.4-1\r\nWSLg version: 1.0.65\r\nMSRDC version: 1.2.5620\r\nDirect3D version: 1.611.1-81528511\r\nDXCore version: 10.0.26100.1-240331-1435.ge-release\r\nWindows version: 10.0.22631.4602\r\n"
	sampleVersionDE   = "WSL-Version: 2.0.14.0\r\nKernelversion: 5.15.133.1-1\r\nWSLg-Version: 1.0.59\r\nMSRDC-Version: 1.2.4677\r\nDirect3D-Version: 1.611.1-81528511\r\nDXCore-Version: 10.0.25131.1002-220531-1700.rs-onecore-base2-hyp\r\nWindows-Version: 10.0.22631.2861\r\n"
	sampleVersionZH   = "WSL 版本： 2.6.1.0\r\n内核版本： 6.6.87.2-1\r\nWSLg 版本： 1.0.66\r\nMSRDC 版本： 1.2.6074\r\nDirect3D 版本： 1.611.1-81528511\r\nDXCore 版本： 10.0.26100.1-240331-1435.ge-release\r\nWindows 版本： 10.0.26100.4652\r\n"
	sampleVersionOld  = "WSL version: 1.2.5.0\r\nKernel version: 5.15.90.1\r\nWSLg version: 1.0.51\r\nMSRDC version: 1.2.3770\r\nDirect3D version: 1.608.2-61064218\r\nDXCore version: 10.0.25131.1002-220531-1700.rs-onecore-base2-hyp\r\nWindows version: 10.0.22621.1702\r\n"
	sampleVersionInbx = "Invalid command line option: --version\r\nCopyright (c) Microsoft Corporation. All rights reserved.\r\n\r\nUsage: wsl.exe [Argument] [Options...] [CommandLine]\r\n"
	sampleStatusEN    = "Default Distribution: Ubuntu-24.04\r\nDefault Version: 2\r\n"
	sampleStatusNoDef = "Default Version: 1\r\n"
	sampleStatusOld   = "Default Distribution: Ubuntu\r\nDefault Version: 2\r\n\r\nWindows Subsystem for Linux was last updated on 3/1/2023\r\nWSL automatic updates are on.\r\n\r\nKernel version: 5.10.102.1\r\n"
	sampleStatusDE    = "Standarddistribution: Ubuntu\r\nStandardversion: 2\r\n"
	sampleStatusZH    = "默认分发：Ubuntu\r\n默认版本：2\r\n"
)

// encodings are the ways wsl.exe's bytes arrive: UTF-16LE (its default,
// without a byte order mark), UTF-16LE with one (a console redirect),
// UTF-8 (WSL_UTF8=1) with and without one.
var encodings = []struct {
	name   string
	encode func(string) []byte
}{
	{"utf-16le", utf16le},
	{"utf-16le with bom", func(s string) []byte { return append([]byte{0xff, 0xfe}, utf16le(s)...) }},
	{"utf-8", func(s string) []byte { return []byte(s) }},
	{"utf-8 with bom", func(s string) []byte { return append([]byte{0xef, 0xbb, 0xbf}, s...) }},
}

func utf16le(s string) []byte {
	units := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(units))
	for i, u := range units {
		b[2*i], b[2*i+1] = byte(u), byte(u>>8)
	}
	return b
}

func TestDecodeOutput(t *testing.T) {
	for _, e := range encodings {
		t.Run(e.name, func(t *testing.T) {
			text := "Ubuntu-24.04\r\n默认版本：2\r\n"
			if got, want := decodeOutput(e.encode(text)), "Ubuntu-24.04\n默认版本：2\n"; got != want {
				t.Errorf("decodeOutput = %q, want %q", got, want)
			}
		})
	}
	if got := decodeOutput(nil); got != "" {
		t.Errorf("decodeOutput(nil) = %q", got)
	}
}

func TestParseListQuiet(t *testing.T) {
	for _, e := range encodings {
		t.Run(e.name, func(t *testing.T) {
			got := parseListQuiet(decodeOutput(e.encode(sampleListQuiet)))
			if diff := cmp.Diff([]string{"Ubuntu-24.04", "tupper-abc123", "docker-desktop"}, got); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
		})
	}
	if got := parseListQuiet(decodeOutput(utf16le(""))); len(got) != 0 {
		t.Errorf("no distributions: %q", got)
	}
}

func TestParseListVerbose(t *testing.T) {
	tests := []struct {
		name   string
		sample string
		want   []listEntry
	}{
		{"english", sampleListVerbose, []listEntry{
			{Name: "Ubuntu-24.04", State: distroRunning, Version: 2, Default: true},
			{Name: "tupper-abc123", State: distroStopped, Version: 2},
			{Name: "docker-desktop", State: distroInstalling, Version: 2},
			{Name: "Legacy", State: distroStopped, Version: 1},
		}},
		{"translated header", sampleListVerboseDE, []listEntry{
			{Name: "tupper-abc123", State: distroRunning, Version: 2},
			{Name: "Debian", State: distroStopped, Version: 2, Default: true},
		}},
		{"unknown state word", sampleListVerboseOddState, []listEntry{
			{Name: "tupper-abc123", State: "Wird ausgeführt", Version: 2},
		}},
	}
	for _, tt := range tests {
		for _, e := range encodings {
			t.Run(tt.name+"/"+e.name, func(t *testing.T) {
				got, err := parseListVerbose(decodeOutput(e.encode(tt.sample)))
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("entries (-want +got):\n%s", diff)
				}
			})
		}
	}
	for _, bad := range []string{"", "  NAME STATE VERSION\r\n  only-a-name\r\n", "  NAME STATE VERSION\r\n  x Running two\r\n"} {
		if got, err := parseListVerbose(decodeOutput(utf16le(bad))); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("parseListVerbose(%q) = %v, %v; want errdefs.ErrUnavailable", bad, got, err)
		}
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		name     string
		sample   string
		want     versionInfo
		atLeast2 bool
	}{
		{"english", sampleVersionEN, versionInfo{WSL: "2.3.26.0", Kernel: "5.15.167.4-1", Windows: "10.0.22631.4602"}, true},
		{"german", sampleVersionDE, versionInfo{WSL: "2.0.14.0", Kernel: "5.15.133.1-1", Windows: "10.0.22631.2861"}, true},
		{"chinese, full-width colons", sampleVersionZH, versionInfo{WSL: "2.6.1.0", Kernel: "6.6.87.2-1", Windows: "10.0.26100.4652"}, true},
		{"a 1.x release", sampleVersionOld, versionInfo{WSL: "1.2.5.0", Kernel: "5.15.90.1", Windows: "10.0.22621.1702"}, false},
	}
	for _, tt := range tests {
		for _, e := range encodings {
			t.Run(tt.name+"/"+e.name, func(t *testing.T) {
				got, err := parseVersion(decodeOutput(e.encode(tt.sample)))
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("version (-want +got):\n%s", diff)
				}
				if ok := versionAtLeast(got.WSL, 2, 0); ok != tt.atLeast2 {
					t.Errorf("versionAtLeast(%s, 2, 0) = %v", got.WSL, ok)
				}
			})
		}
	}
	if v, err := parseVersion(decodeOutput(utf16le(sampleVersionInbx))); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("the inbox wsl.exe's usage parsed as %+v, %v; want errdefs.ErrNotSupported", v, err)
	}
}

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name   string
		sample string
		want   int
	}{
		{"english", sampleStatusEN, 2},
		{"no default distribution", sampleStatusNoDef, 1},
		{"an older release's longer status", sampleStatusOld, 2},
		{"german", sampleStatusDE, 2},
		{"chinese, full-width colons", sampleStatusZH, 2},
	}
	for _, tt := range tests {
		for _, e := range encodings {
			t.Run(tt.name+"/"+e.name, func(t *testing.T) {
				got, err := parseStatus(decodeOutput(e.encode(tt.sample)))
				if err != nil || got != tt.want {
					t.Errorf("parseStatus = %d, %v; want %d", got, err, tt.want)
				}
			})
		}
	}
	if got, err := parseStatus("nothing useful\n"); err == nil {
		t.Errorf("parseStatus of no version = %d, nil; want an error", got)
	}
}
