package wsl

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/lightbearco/tupper/errdefs"
)

// wsl.exe writes its own messages in UTF-16LE, without a byte order mark,
// with CRLF line ends. WSL_UTF8=1 makes releases from 0.64 on write UTF-8
// instead; the backend sets it, and still reads both, since older releases
// ignore it and a BOM is sometimes there (a console redirect adds one).

// decodeOutput turns what wsl.exe printed into text with "\n" line ends.
// UTF-8 never holds a zero byte and every line of wsl's UTF-16LE holds
// some (CR and LF are 0D 00 and 0A 00), so a zero byte anywhere means
// UTF-16LE.
func decodeOutput(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte{0xff, 0xfe}):
		return normalizeLines(decodeUTF16LE(b[2:]))
	case bytes.HasPrefix(b, []byte{0xef, 0xbb, 0xbf}):
		return normalizeLines(string(b[3:]))
	case bytes.IndexByte(b, 0) >= 0:
		return normalizeLines(decodeUTF16LE(b))
	}
	return normalizeLines(string(b))
}

func decodeUTF16LE(b []byte) string {
	units := make([]uint16, len(b)/2)
	for i := range units {
		units[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	return string(utf16.Decode(units))
}

// normalizeLines turns CRLF (and a lone CR, which some wsl messages end
// with) into LF and drops a BOM that was inside the encoded text.
func normalizeLines(s string) string {
	s = strings.TrimPrefix(s, "\ufeff")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

// lines returns the non-blank lines of s, with their spaces kept.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// parseListQuiet reads `wsl --list --quiet`: one distribution name a line.
func parseListQuiet(out string) []string {
	var names []string
	for _, l := range lines(out) {
		names = append(names, strings.TrimSpace(l))
	}
	return names
}

// distroState is a distribution's state as `wsl --list --verbose` prints
// it. WSL prints these words in English whatever the display language
// (src/windows/common/WslClient.cpp); only the header is translated.
type distroState string

const (
	distroRunning      distroState = "Running"
	distroStopped      distroState = "Stopped"
	distroInstalling   distroState = "Installing"
	distroUninstalling distroState = "Uninstalling"
	distroConverting   distroState = "Converting"
	distroExporting    distroState = "Exporting"
)

// listEntry is one row of `wsl --list --verbose`.
type listEntry struct {
	Name    string
	State   distroState
	Version int
	Default bool
}

// parseListVerbose reads the table of `wsl --list --verbose`:
//
//	  NAME            STATE           VERSION
//	* Ubuntu-24.04    Running         2
//	  tupper-abc      Stopped         2
//
// by position, never by its header, which is translated: the first line
// is the header; in each row after it an optional "*" marks the default
// distribution, the first field is the name (a distribution name holds no
// space), the last the WSL version, and what lies between is the state.
func parseListVerbose(out string) ([]listEntry, error) {
	ls := lines(out)
	if len(ls) == 0 {
		return nil, fmt.Errorf("wsl --list --verbose printed nothing, not even its header: %w", errdefs.ErrUnavailable)
	}
	var entries []listEntry
	for _, row := range ls[1:] {
		f := strings.Fields(row)
		e := listEntry{}
		if len(f) > 0 && f[0] == "*" {
			e.Default = true
			f = f[1:]
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("wsl --list --verbose: row %q has not a name, a state and a version: %w", row, errdefs.ErrUnavailable)
		}
		e.Name = f[0]
		e.State = distroState(strings.Join(f[1:len(f)-1], " "))
		if _, err := fmt.Sscanf(f[len(f)-1], "%d", &e.Version); err != nil {
			return nil, fmt.Errorf("wsl --list --verbose: row %q: version %q: %w", row, f[len(f)-1], errdefs.ErrUnavailable)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// versionInfo is what `wsl --version` reports.
type versionInfo struct {
	WSL     string
	Kernel  string
	Windows string
}

// versionToken is a version as wsl prints them: 2.0.9.0, 5.15.133.1-1,
// 10.0.22631.2861.
var versionToken = regexp.MustCompile(`^\d+(\.\d+)+\S*$`)

// parseVersion reads `wsl --version` by position, since its labels are
// translated ("WSL version:", "WSL-Version:", "WSL 版本："): the first line
// is WSL's version, the second the kernel's, the last Windows'. Each value
// is the line's last field. The inbox wsl.exe of Windows 10 knows no
// --version and prints its usage instead, which parses as no version.
func parseVersion(out string) (versionInfo, error) {
	ls := lines(out)
	value := func(i int) string {
		if i < 0 || i >= len(ls) {
			return ""
		}
		f := strings.Fields(ls[i])
		if len(f) == 0 || !versionToken.MatchString(f[len(f)-1]) {
			return ""
		}
		return f[len(f)-1]
	}
	v := versionInfo{WSL: value(0), Kernel: value(1)}
	if len(ls) >= 3 {
		v.Windows = value(len(ls) - 1)
	}
	if v.WSL == "" {
		first := ""
		if len(ls) > 0 {
			first = strings.TrimSpace(ls[0])
		}
		return v, fmt.Errorf("wsl --version printed no version on its first line (%q): %w", first, errdefs.ErrNotSupported)
	}
	return v, nil
}

// versionAtLeast reports whether dotted version v is at least major.minor.
func versionAtLeast(v string, major, minor int) bool {
	var a, b int
	if n, _ := fmt.Sscanf(v, "%d.%d", &a, &b); n < 1 {
		return false
	}
	return a > major || a == major && b >= minor
}

// parseStatus reads the default WSL version from `wsl --status`:
//
//	Default Distribution: Ubuntu-24.04
//	Default Version: 2
//
// The labels are translated and the first line is missing when there is no
// default distribution, so it takes the last line whose value (after the
// last colon, ASCII or full-width) is 1 or 2. Older releases print more
// lines after it (the last update, the kernel version), none of which is
// 1 or 2.
func parseStatus(out string) (int, error) {
	version := 0
	for _, l := range lines(out) {
		i := strings.LastIndexAny(l, ":：")
		if i < 0 {
			continue
		}
		_, width := utf8.DecodeRuneInString(l[i:])
		switch strings.TrimSpace(l[i+width:]) {
		case "1":
			version = 1
		case "2":
			version = 2
		}
	}
	if version == 0 {
		return 0, fmt.Errorf("wsl --status names no default version: %w", errdefs.ErrUnavailable)
	}
	return version, nil
}
