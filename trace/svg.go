package trace

import (
	"fmt"
	"io"
	"math"
	"strings"

	"ferry/device"
)

var categoryColors = [device.NumCategories]string{
	device.Activation:     "#e4572e",
	device.Parameter:      "#4c72b0",
	device.Gradient:       "#55a868",
	device.OptimizerState: "#8172b2",
	device.Workspace:      "#ccb974",
	device.Temporary:      "#8c8c8c",
}

// stack draws categories bottom to top in this order: what stays (weights)
// at the bottom, what comes and goes on top.
var stack = []device.Category{device.Parameter, device.OptimizerState, device.Gradient, device.Workspace, device.Activation, device.Temporary}

// WriteSVG draws one allocator's memory over time, stacked by category,
// with the spans of every track as bars underneath.
func (r *Recorder) WriteSVG(w io.Writer, allocator, title string) error {
	samples := r.Samples(allocator)
	spans := r.Spans()
	if len(samples) == 0 {
		return fmt.Errorf("trace: no samples for %q", allocator)
	}
	const (
		width, plotH     = 900.0, 360.0
		left, top, right = 80.0, 40.0, 50.0
		barH             = 14.0
	)
	tracks := map[string]int{}
	for _, s := range spans {
		if _, ok := tracks[s.Track]; !ok {
			tracks[s.Track] = len(tracks)
		}
	}
	height := top + plotH + 40 + float64(len(tracks))*(barH+4) + 40
	t0, t1 := samples[0].Seconds, samples[len(samples)-1].Seconds
	for _, s := range spans {
		t0, t1 = math.Min(t0, s.Start), math.Max(t1, s.End)
	}
	if t1 <= t0 {
		t1 = t0 + 1e-9
	}
	peak, peakAt := Peak(samples)
	ymax := niceCeil(float64(max(peak, 1))/(1<<20)) * (1 << 20) // a round number of MiB
	pw := width - left - right
	x := func(t float64) float64 { return left + (t-t0)/(t1-t0)*pw }
	y := func(b float64) float64 { return top + plotH - b/ymax*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14">%s</text>`+"\n", left, escape(title))
	// Areas: for each category, the band between the cumulative sums below
	// and including it, drawn as steps.
	for i := len(stack) - 1; i >= 0; i-- {
		var pts []string
		level := func(s Sample) float64 {
			var v int64
			for _, c := range stack[:i+1] {
				v += s.Bytes[c]
			}
			return float64(v)
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(samples[0].Seconds), y(0)))
		prev := 0.0
		for j, s := range samples {
			if j > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.Seconds), y(prev)))
			}
			prev = level(s)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.Seconds), y(prev)))
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(t1), y(prev)), fmt.Sprintf("%.1f,%.1f", x(t1), y(0)))
		fmt.Fprintf(&b, `<polygon points="%s" fill="%s" stroke="none"/>`+"\n", strings.Join(pts, " "), categoryColors[stack[i]])
	}
	// Axes and ticks.
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, top, left, top+plotH)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, top+plotH, width-right, top+plotH)
	for k := 0; k <= 4; k++ {
		v := ymax * float64(k) / 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(v)+4, formatMiB(v))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" stroke-opacity="0.15"/>`+"\n", left, y(v), width-right, y(v))
	}
	for k := 0; k <= 5; k++ {
		t := t0 + (t1-t0)*float64(k)/5
		label := formatSeconds(t - t0)
		if r.unit != "s" {
			label = fmt.Sprintf("%.0f %s", t-t0, r.unit)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(t), top+plotH+16, label)
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="4 3"/>`+"\n", x(peakAt), top, x(peakAt), top+plotH)
	anchor, dx := "start", 4.0
	if x(peakAt) > left+pw*0.8 {
		anchor, dx = "end", -4
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="%s">peak %s</text>`+"\n", x(peakAt)+dx, top+12, anchor, formatMiB(float64(peak)))
	// Spans.
	base := top + plotH + 30
	for _, s := range spans {
		row := base + float64(tracks[s.Track])*(barH+4)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="#bbb" stroke="white"><title>%s: %s</title></rect>`+"\n",
			x(s.Start), row, math.Max(x(s.End)-x(s.Start), 0.5), barH, escape(s.Track), escape(s.Name))
		if x(s.End)-x(s.Start) > 7*float64(len(s.Name)) {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10">%s</text>`+"\n", x(s.Start)+3, row+barH-3, escape(s.Name))
		}
	}
	for name, i := range tracks {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" font-size="10">%s</text>`+"\n", left-6, base+float64(i)*(barH+4)+barH-3, escape(name))
	}
	// Legend.
	lx := left
	ly := height - 14
	for _, c := range stack {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			lx, ly-9, categoryColors[c], lx+14, ly, c)
		lx += 14 + 8*float64(len(c.String())) + 18
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func formatSeconds(t float64) string {
	switch {
	case t >= 1:
		return fmt.Sprintf("%.2f s", t)
	case t >= 1e-3:
		return fmt.Sprintf("%.1f ms", t*1e3)
	default:
		return fmt.Sprintf("%.0f µs", t*1e6)
	}
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
