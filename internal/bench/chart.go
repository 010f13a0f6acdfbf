package bench

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
)

// Chart geometry, in pixels.
const (
	chartW     = 1200
	chartPad   = 20
	labelW     = 440 // the figure names
	valueW     = 140 // the median's value right of the bars
	rowH       = 28
	barH       = 16
	panelHead  = 40
	panelFoot  = 36
	textScale  = 2
	panelGap   = 16
	chartTitle = 44
)

var (
	colBG      = color.RGBA{255, 255, 255, 255}
	colText    = color.RGBA{30, 30, 30, 255}
	colGrid    = color.RGBA{225, 225, 225, 255}
	colBar     = color.RGBA{66, 120, 190, 255}
	colRawBar  = color.RGBA{150, 150, 150, 255}
	colWhisker = color.RGBA{20, 20, 20, 255}
)

// panel is one block of the chart: figures of one unit on one axis.
type panel struct {
	title string
	unit  string
	log   bool
	figs  []*Figure
}

// Chart draws the medians of the measured figures as horizontal bars with
// whiskers to their p95, as a PNG: the figures in milliseconds on one
// logarithmic axis (they span from a raw exec to many concurrent creates),
// memory on a linear one.
func (r *Report) Chart() ([]byte, error) {
	panels := []*panel{
		{title: "milliseconds, log scale: bar = median, whisker = p95", unit: UnitMS, log: true},
		{title: "MiB of host memory per idle sandbox: bar = median, whisker = p95", unit: UnitMiB},
	}
	for _, f := range r.Figures {
		if len(f.Samples) == 0 {
			continue
		}
		for _, p := range panels {
			if p.unit == f.Unit {
				p.figs = append(p.figs, f)
			}
		}
	}
	h := chartPad*2 + chartTitle
	for _, p := range panels {
		if len(p.figs) > 0 {
			h += panelHead + len(p.figs)*rowH + panelFoot + panelGap
		}
	}
	img := image.NewRGBA(image.Rect(0, 0, chartW, h))
	fill(img, img.Bounds(), colBG)
	title := "tupper bench"
	if r.Machine.DaemonURL != "" {
		title += ": " + r.Machine.DaemonURL
	}
	drawText(img, chartPad, chartPad, 3, fit(title, (chartW-2*chartPad)/(glyphAdv*3)), colText)
	y := chartPad + chartTitle
	drawn := false
	for _, p := range panels {
		if len(p.figs) == 0 {
			continue
		}
		y = p.draw(img, y) + panelGap
		drawn = true
	}
	if !drawn {
		drawText(img, chartPad, y, textScale, "no figure was measured", colText)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// draw draws p from y down and returns where it ends.
func (p *panel) draw(img *image.RGBA, y int) int {
	drawText(img, chartPad, y+8, textScale, p.title, colText)
	y += panelHead
	x0, x1 := chartPad+labelW, chartW-chartPad-valueW
	lo, hi := p.bounds()
	pos := func(v float64) int {
		var t float64
		if p.log {
			t = (math.Log10(max(v, lo)) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
		} else {
			t = v / hi
		}
		return x0 + int(math.Round(t*float64(x1-x0)))
	}
	bottom := y + len(p.figs)*rowH
	for _, tick := range p.ticks(lo, hi) {
		x := pos(tick)
		fill(img, image.Rect(x, y, x+1, bottom), colGrid)
		label := trimFloat(tick)
		drawText(img, x-textWidth(label, textScale)/2, bottom+8, textScale, label, colText)
	}
	for i, f := range p.figs {
		s := Summarize(f.Samples)
		ry := y + i*rowH
		drawText(img, chartPad, ry+(rowH-glyphH*textScale)/2, textScale, fit(f.Name, labelW/(glyphAdv*textScale)-1), colText)
		bar := colBar
		if f.Section == SectionRaw {
			bar = colRawBar
		}
		top := ry + (rowH-barH)/2
		xm, xp := pos(s.Median), pos(s.P95)
		fill(img, image.Rect(x0, top, max(xm, x0+1), top+barH), bar)
		mid := top + barH/2
		fill(img, image.Rect(xm, mid, max(xp, xm+1), mid+2), colWhisker)
		fill(img, image.Rect(xp-1, top+2, xp+1, top+barH-2), colWhisker)
		drawText(img, x1+10, ry+(rowH-glyphH*textScale)/2, textScale, formatValue(s.Median, f.Unit), colText)
	}
	fill(img, image.Rect(x0, y, x0+1, bottom), colText)
	return bottom + panelFoot
}

// bounds is the range of p's axis: whole decades around every median and
// p95 on a log axis, zero to a little over the largest p95 on a linear one.
func (p *panel) bounds() (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for _, f := range p.figs {
		s := Summarize(f.Samples)
		lo, hi = min(lo, s.Median, s.P95), max(hi, s.Median, s.P95)
	}
	if p.log {
		lo = math.Pow(10, math.Floor(math.Log10(max(lo, 0.01))))
		hi = math.Pow(10, math.Ceil(math.Log10(max(hi, lo*10))))
		if hi <= lo {
			hi = lo * 10
		}
		return lo, hi
	}
	if hi <= 0 {
		hi = 1
	}
	return 0, niceStep(hi/4) * 5
}

// ticks are where p's grid lines go: each decade, or five even steps.
func (p *panel) ticks(lo, hi float64) []float64 {
	var out []float64
	if p.log {
		for v := lo; v <= hi*1.0001; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	step := hi / 5
	for i := range 6 {
		out = append(out, float64(i)*step)
	}
	return out
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*e {
			return m * e
		}
	}
	return 10 * e
}

// trimFloat prints v without needless decimals.
func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", v)
}

// fit cuts s to n characters, marking the cut.
func fit(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 3 {
		return s
	}
	return string(r[:n-2]) + ".."
}
