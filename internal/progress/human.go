package progress

import (
	"fmt"
	"time"
)

// humanAmount writes current of total units for people: "12.3/40.1 MiB"
// or "12/30 packages"; without a total, only the current amount.
func humanAmount(current, total int64, unit string) string {
	if unit != "bytes" {
		if total > 0 {
			return fmt.Sprintf("%d/%d %s", current, total, unit)
		}
		return fmt.Sprintf("%d %s", current, unit)
	}
	if total <= 0 {
		return humanBytes(current)
	}
	// Both in the total's unit, as "12.3/40.1 MiB".
	v, suffix := scaleBytes(total)
	scale := float64(total) / v
	return fmt.Sprintf("%.1f/%.1f %s", float64(current)/scale, v, suffix)
}

// humanBytes writes n bytes in binary units: "512 B", "12.3 MiB".
func humanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := scaleBytes(n)
	return fmt.Sprintf("%.1f %s", v, suffix)
}

// scaleBytes returns n in the largest binary unit it holds one of, and the
// unit's name.
func scaleBytes(n int64) (float64, string) {
	v := float64(n)
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return v, units[i]
}

// humanDuration writes d to the second: "42s", "2m05s", "1h02m".
func humanDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
}

// truncate cuts s to at most width runes, marking the cut with "…".
func truncate(s string, width int) string {
	r := []rune(s)
	if width <= 0 || len(r) <= width {
		return s
	}
	return string(r[:width-1]) + "…"
}

// rateWindow is how far back a rate looks.
const rateWindow = 5 * time.Second

// rateMeter measures how fast an amount moves, over the last rateWindow.
type rateMeter struct {
	samples []rateSample
}

type rateSample struct {
	at time.Time
	n  int64
}

func (m *rateMeter) reset() { m.samples = m.samples[:0] }

// add notes that the amount was n at time at.
func (m *rateMeter) add(at time.Time, n int64) {
	m.samples = append(m.samples, rateSample{at, n})
	// Keep one sample older than the window, to measure the whole window.
	drop := 0
	for drop+1 < len(m.samples) && at.Sub(m.samples[drop+1].at) >= rateWindow {
		drop++
	}
	m.samples = append(m.samples[:0], m.samples[drop:]...)
}

// minRateSpan is the least time a rate is measured over.
const minRateSpan = 500 * time.Millisecond

// perSecond returns the rate in units a second, and whether there was
// enough time to measure one.
func (m *rateMeter) perSecond() (float64, bool) {
	if len(m.samples) < 2 {
		return 0, false
	}
	first, last := m.samples[0], m.samples[len(m.samples)-1]
	span := last.at.Sub(first.at)
	if span < minRateSpan {
		return 0, false
	}
	return float64(last.n-first.n) / span.Seconds(), true
}
