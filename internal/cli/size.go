package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeFlag is a flag of a size in MB (MiB), written as "2G", "512M", "1.5G",
// "10GiB" or a bare number of MB. Units are binary: 1G is 1024 MB.
type sizeFlag struct {
	mb int
}

// sizeUnits are the units a sizeFlag takes, in MB, by their first letter.
var sizeUnits = map[byte]float64{'m': 1, 'g': 1 << 10, 't': 1 << 20}

// parseSizeMB parses s as sizeFlag does.
func parseSizeMB(s string) (int, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := 1.0
	if n := len(t); n > 0 {
		if m, ok := sizeUnits[t[n-1]]; ok {
			mult, t = m, t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	mb := v * mult
	if err != nil || v < 0 || math.IsNaN(v) || mb > math.MaxInt32 || mb != math.Trunc(mb) {
		return 0, fmt.Errorf("size %q: want a whole number of MB, or a number with a unit such as 512M, 2G or 1.5T", s)
	}
	return int(mb), nil
}

func (f *sizeFlag) Set(s string) error {
	mb, err := parseSizeMB(s)
	if err != nil {
		return err
	}
	f.mb = mb
	return nil
}

func (f *sizeFlag) String() string {
	switch {
	case f.mb == 0:
		return ""
	case f.mb%(1<<20) == 0:
		return strconv.Itoa(f.mb>>20) + "T"
	case f.mb%(1<<10) == 0:
		return strconv.Itoa(f.mb>>10) + "G"
	default:
		return strconv.Itoa(f.mb) + "M"
	}
}

func (f *sizeFlag) Type() string { return "size" }
