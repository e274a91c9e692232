package plots

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"ferry/device"
	"ferry/trace"
)

// categoryColors give each category one colour, the same in every
// picture ferry draws.
var categoryColors = [device.NumCategories]color.RGBA{
	device.Activation:     {R: 0xe4, G: 0x57, B: 0x2e, A: 0xff},
	device.Parameter:      {R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
	device.Gradient:       {R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
	device.OptimizerState: {R: 0x81, G: 0x72, B: 0xb2, A: 0xff},
	device.Workspace:      {R: 0xcc, G: 0xb9, B: 0x74, A: 0xff},
	device.Temporary:      {R: 0x8c, G: 0x8c, B: 0x8c, A: 0xff},
}

// stack is the order of the bands, bottom to top, for every chart:
// what stays for the whole step (weights, optimizer state) at the bottom,
// what comes and goes on top.
var stack = []device.Category{device.Parameter, device.OptimizerState, device.Gradient, device.Workspace, device.Activation, device.Temporary}

// categoryLabels name the categories for people.
var categoryLabels = [device.NumCategories]string{
	device.Activation:     "activations",
	device.Parameter:      "parameters",
	device.Gradient:       "gradients",
	device.OptimizerState: "optimizer state",
	device.Workspace:      "workspace",
	device.Temporary:      "temporaries",
}

// byteUnit picks the binary unit in which peak reads as a number between 1
// and 1024 (bytes below 1 KiB).
func byteUnit(peak int64) (name string, size float64) {
	switch {
	case peak >= 1<<40:
		return "TiB", 1 << 40
	case peak >= 1<<30:
		return "GiB", 1 << 30
	case peak >= 1<<20:
		return "MiB", 1 << 20
	case peak >= 1<<10:
		return "KiB", 1 << 10
	}
	return "bytes", 1
}

// timeUnit picks the unit in which a span of seconds reads as a number
// of at least 1 where it can.
func timeUnit(span float64) (name string, size float64) {
	switch {
	case span >= 1:
		return "s", 1
	case span >= 1e-3:
		return "ms", 1e-3
	case span >= 1e-6:
		return "µs", 1e-6
	}
	return "ns", 1e-9
}

// Memory writes DIR/NAME.png and DIR/NAME.svg: an allocator's
// bytes over time as stacked bands, one per category that holds any bytes
// at some sample (parameters at the bottom, activations and temporaries on
// top), with the peak total marked. samples are a trace.Recorder's for
// one allocator (Recorder.Samples), usually over one training step; the x
// axis is the time since the first sample, in s, ms or µs by the length of
// the recording, and the y axis is in KiB, MiB or GiB by the peak. Each
// sample holds until the next one, so the bands are drawn as steps.
//
// The x axis reads samples' Seconds as seconds; MemoryOf reads a
// recorder's own unit.
//
// It returns an error wrapping ErrNoData when samples is empty.
func Memory(dir, name, title string, samples []trace.Sample) error {
	return memory(dir, name, title, samples, "s")
}

// MemoryOf is Memory for rec's samples of allocator, on rec's clock: in
// seconds, or, for a trace.NewCounting recorder (a device whose time does
// not move), in events, so that no axis shows made-up seconds.
func MemoryOf(dir, name, title string, rec *trace.Recorder, allocator string) error {
	return memory(dir, name, title, rec.Samples(allocator), rec.Unit())
}

func memory(dir, name, title string, samples []trace.Sample, unit string) error {
	if len(samples) == 0 {
		return fmt.Errorf("%w: no memory samples", ErrNoData)
	}
	peak, peakAt := trace.Peak(samples)
	bunit, bsize := byteUnit(peak)
	t0, t1 := samples[0].Seconds, samples[0].Seconds
	for _, s := range samples {
		t0, t1 = min(t0, s.Seconds), max(t1, s.Seconds)
	}
	tunit, tsize := timeUnit(t1 - t0)
	xLabel := "time in the step (" + tunit + ")"
	if unit != "s" {
		// A counting clock: one unit per allocation, free or span end.
		tunit, tsize = "", 1
		xLabel = "allocations and frees, in order (this device keeps no time)"
	}
	x := func(i int) float64 { return (samples[i].Seconds - t0) / tsize }
	xEnd := (t1 - t0) / tsize
	if t1 <= t0 {
		// No time passed (one sample, or a clock that did not move):
		// the order of the samples is all there is to show, and the
		// last one is drawn one sample wide so that it is seen.
		xLabel = "sample (all at one instant)"
		x = func(i int) float64 { return float64(i) }
		xEnd = float64(len(samples))
	}
	var used [device.NumCategories]bool
	for _, s := range samples {
		for c, b := range s.Bytes {
			used[c] = used[c] || b != 0
		}
	}

	p := newPlot(title, xLabel, "allocated ("+bunit+")")
	if t1 <= t0 || unit != "s" {
		p.X.Tick.Marker = ticks{integer: true}
	}
	leg := newLegend()
	// Each band is the cumulative sum of its category and those below it,
	// filled down to zero; drawn top band first, each lower band paints
	// over the part of the one above that is not its own.
	var bands []*plotter.Line
	var names []string
	for i := len(stack) - 1; i >= 0; i-- {
		c := stack[i]
		if !used[c] {
			continue
		}
		data := make(plotter.XYs, 0, len(samples)+1)
		for j, s := range samples {
			var v int64
			for _, below := range stack[:i+1] {
				v += s.Bytes[below]
			}
			data = append(data, plotter.XY{X: x(j), Y: float64(v) / bsize})
		}
		if last := data[len(data)-1]; last.X < xEnd {
			data = append(data, plotter.XY{X: xEnd, Y: last.Y})
		}
		l, err := plotter.NewLine(data)
		if err != nil {
			return fmt.Errorf("plots: memory of %s: %w", c, err)
		}
		l.StepStyle = plotter.PostStep
		l.FillColor = categoryColors[c]
		l.LineStyle.Width = 0
		bands = append(bands, l)
		names = append(names, categoryLabels[c])
	}
	for i, l := range bands {
		p.Add(l)
		leg.Add(names[i], l)
	}
	if peak == 0 { // every sample is zero: say so rather than draw nothing
		leg.Add("(nothing allocated)")
	} else {
		peakLine, err := plotter.NewLine(plotter.XYs{
			{X: 0, Y: float64(peak) / bsize},
			{X: xEnd, Y: float64(peak) / bsize},
		})
		if err != nil {
			return fmt.Errorf("plots: peak: %w", err)
		}
		peakLine.Color = color.Black
		peakLine.Width = vg.Points(1)
		peakLine.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(peakLine)
		peakLabel := "peak " + device.FormatBytes(peak)
		switch {
		case t1 > t0 && unit != "s":
			peakLabel += fmt.Sprintf(" at event %.0f", peakAt-t0)
		case t1 > t0:
			peakLabel += fmt.Sprintf(" at %.3g %s", (peakAt-t0)/tsize, tunit)
		}
		leg.Add(peakLabel, peakLine)
	}
	if bsize == 1 {
		p.Y.Tick.Marker = ticks{integer: true}
	}

	p.Y.Min = 0
	p.Y.Max = max(p.Y.Max*1.05, 1) // room above the peak line
	p.X.Min, p.X.Max = 0, xEnd
	return save(dir, name, p, leg)
}
