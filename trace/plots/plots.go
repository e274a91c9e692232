// Package plots draws the pictures of a training run with gonum/plot: loss
// curves over steps, held-out accuracy over steps, and device memory over a step
// stacked by category. Each function writes one picture twice, as PNG (to
// look at) and SVG (to zoom into or put in a page), into a directory it
// creates if needed.
//
// Files are written atomically (ferry/internal/fsx.WriteAtomic): a reader
// sees the old file or the new one, never half of one. The two formats are
// separate files, so an error on the second leaves the first in place,
// whole.
//
// Empty input is an error (ErrNoData), not an empty picture: a caller that
// would rather skip the plot checks errors.Is(err, plots.ErrNoData).
package plots

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"ferry/internal/fsx"
)

// ErrNoData is returned (wrapped) when there is nothing to draw: no points,
// or none with a finite value.
var ErrNoData = errors.New("plots: no data to draw")

// Point is one value of a series at a training step.
type Point struct {
	Step  int     `json:"step"`
	Value float64 `json:"value"`
}

// The size of every picture: 8 × 4.5 inches, at 150 dots per inch in PNG
// (1200 × 675 pixels).
const (
	width  = 8 * vg.Inch
	height = 4.5 * vg.Inch
	dpi    = 150
)

// Colours of the series: the first two are the train and validation
// curves.
var (
	trainColor = color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff}
	valColor   = color.RGBA{R: 0xe4, G: 0x57, B: 0x2e, A: 0xff}
)

// sans is the typeface of all text: Liberation Sans, which gonum/plot
// carries inside it (its default is the serif).
var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// newPlot makes a plot with ferry's text sizes: a 14-point title, 12-point
// axis labels and legend, 11-point tick labels, and a light grid.
func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(sans, vg.Points(14))
	p.Title.Padding = vg.Points(8)
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, vg.Points(12))
		a.Tick.Label.Font = font.From(sans, vg.Points(11))
	}
	p.X.Tick.Marker = ticks{}
	p.Y.Tick.Marker = ticks{}
	p.X.Padding, p.Y.Padding = 0, 0
	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{Y: 0xdd}
	grid.Horizontal.Color = color.Gray{Y: 0xdd}
	grid.Vertical.Width = vg.Points(0.5)
	grid.Horizontal.Width = vg.Points(0.5)
	p.Add(grid)
	return p
}

// newLegend makes a legend with ferry's text size, for drawing beside the
// plot (see render).
func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.TextStyle.Font = font.From(sans, vg.Points(12))
	l.Top, l.Left = true, true
	l.Padding = vg.Points(4)
	l.ThumbnailWidth = vg.Points(18)
	return l
}

// render draws p on c with the legend in a column of its own to the
// right, top-aligned with the data area, so that the legend never covers a
// curve, whatever the data do.
func render(c vg.CanvasSizer, p *plot.Plot, l plot.Legend) {
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	pad := vg.Points(10)
	lw := l.Rectangle(dc).Size().X
	area := draw.Crop(dc, 0, -(lw + 2*pad), 0, 0)
	fitTitle(p, area.Size().X-2*pad)
	p.Draw(area)
	data := p.DataCanvas(area)
	l.Draw(draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
		Min: vg.Point{X: area.Max.X + pad, Y: data.Min.Y},
		Max: vg.Point{X: dc.Max.X - pad, Y: data.Max.Y},
	}})
}

// fitTitle breaks p's title into lines at spaces so that no line is
// wider than width: gonum/plot centres a title over the plot and cuts off
// whatever overflows at both ends. A single word wider than width keeps
// its own line.
func fitTitle(p *plot.Plot, width vg.Length) {
	style := p.Title.TextStyle
	words := strings.Fields(strings.ReplaceAll(p.Title.Text, "\n", " "))
	var lines []string
	for _, w := range words {
		if n := len(lines); n > 0 && style.Width(lines[n-1]+" "+w) <= width {
			lines[n-1] += " " + w
			continue
		}
		lines = append(lines, w)
	}
	p.Title.Text = strings.Join(lines, "\n")
}

// save draws p and its legend as DIR/NAME.png and DIR/NAME.svg, creating
// DIR if needed. Both pictures are drawn before either file is written, so
// a drawing failure writes nothing.
func save(dir, name string, p *plot.Plot, l plot.Legend) (err error) {
	defer func() {
		// gonum/plot panics on some degenerate input (an axis whose
		// range is not finite); that is the caller's data, so it is an
		// error here, not a crash of the training run.
		if r := recover(); r != nil {
			err = fmt.Errorf("plots: drawing %s: %v", name, r)
		}
	}()
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(dpi))
	render(img, p, l)
	var png bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&png); err != nil {
		return fmt.Errorf("plots: encoding %s.png: %w", name, err)
	}
	svgc := vgsvg.New(width, height)
	render(svgc, p, l)
	var svg bytes.Buffer
	if _, err := svgc.WriteTo(&svg); err != nil {
		return fmt.Errorf("plots: encoding %s.svg: %w", name, err)
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plots: creating the output directory: %w", err)
	}
	for _, f := range []struct {
		ext string
		b   []byte
	}{{".png", png.Bytes()}, {".svg", svg.Bytes()}} {
		path := filepath.Join(dir, name+f.ext)
		err := fsx.WriteAtomic(path, func(w io.Writer) error {
			// WriteAtomic's temporary file is private (0600, from
			// os.CreateTemp); a picture is for anyone who may read the
			// directory, as a file made by os.Create would be. (A
			// path that is not a regular file, a pipe, is written in
			// place and keeps its mode.)
			if file, ok := w.(*os.File); ok && file.Name() != path {
				if err := file.Chmod(0o644); err != nil {
					return err
				}
			}
			_, err := w.Write(f.b)
			return err
		})
		if err != nil {
			return fmt.Errorf("plots: writing %s: %w", path, err)
		}
	}
	return nil
}

// xys turns points into plotter data in step order, leaving out values
// that are not finite (a diverged run's NaN losses): gonum/plot cannot draw
// them, and the finite part of the curve is still worth seeing. It returns
// how many points it left out.
func xys(pts []Point, scale float64) (plotter.XYs, int) {
	sorted := slices.Clone(pts)
	slices.SortStableFunc(sorted, func(a, b Point) int { return a.Step - b.Step })
	out := make(plotter.XYs, 0, len(sorted))
	for _, p := range sorted {
		if math.IsNaN(p.Value) || math.IsInf(p.Value, 0) {
			continue
		}
		out = append(out, plotter.XY{X: float64(p.Step), Y: p.Value * scale})
	}
	return out, len(pts) - len(out)
}

// ticks is a Ticker with about six labelled ticks at round numbers (1, 2,
// 2.5 or 5 times a power of ten apart), written with as many decimals as
// the spacing needs and no exponent: gonum's default labels about three,
// writes 100000 as "1e+05" and 5 as "5.00" beside "2.50". integer keeps
// labels on whole numbers, for steps and epochs.
type ticks struct{ integer bool }

func (t ticks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'f', -1, 64)}}
	}
	raw := (hi - lo) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	if t.integer && (step < 1 || hi-lo <= 12) {
		step = 1 // every epoch of a short run labelled
	}
	decimals := 0
	if step < 1 {
		decimals = int(math.Ceil(-math.Log10(step) - 1e-9))
		if math.Abs(step/math.Pow(10, -float64(decimals))-math.Round(step/math.Pow(10, -float64(decimals)))) > 1e-6 {
			decimals++ // 0.25
		}
	}
	var out []plot.Tick
	for i := math.Ceil(lo/step - 1e-9); i*step <= hi+step*1e-9; i++ {
		v := i * step
		if v == 0 {
			v = 0 // not -0
		}
		out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', decimals, 64)})
		if minor := v + step/2; minor < hi && !(t.integer && step == 1) {
			out = append(out, plot.Tick{Value: minor})
		}
	}
	if first := math.Ceil(lo/step-1e-9) * step; first-step/2 > lo && !(t.integer && step == 1) {
		out = append(out, plot.Tick{Value: first - step/2})
	}
	return out
}

func line(data plotter.XYs, c color.Color, w vg.Length) (*plotter.Line, error) {
	l, err := plotter.NewLine(data)
	if err != nil {
		return nil, err
	}
	l.Color = c
	l.Width = w
	return l, nil
}

// LossCurves writes DIR/loss.png and DIR/loss.svg: the training loss over
// steps and, if val has points, the validation loss, each as a line. yLabel
// "" means "loss (nats per token)". Points may come in any order; values
// that are not finite are left out (the legend says how many). It returns
// an error wrapping ErrNoData when train has no finite value.
func LossCurves(dir, title, yLabel string, train, val []Point) error {
	if yLabel == "" {
		yLabel = "loss (nats per token)"
	}
	tr, trDropped := xys(train, 1)
	if len(tr) == 0 {
		return fmt.Errorf("%w: no training loss with a finite value (%d points)", ErrNoData, len(train))
	}
	va, vaDropped := xys(val, 1)
	p := newPlot(title, "step", yLabel)
	p.X.Tick.Marker = ticks{integer: true}
	leg := newLegend()
	series := []struct {
		name    string
		data    plotter.XYs
		dropped int
		color   color.Color
	}{{"train", tr, trDropped, trainColor}, {"validation", va, vaDropped, valColor}}
	for _, s := range series {
		if len(s.data) == 0 {
			continue
		}
		l, err := line(s.data, s.color, vg.Points(1.5))
		if err != nil {
			return fmt.Errorf("plots: %s loss: %w", s.name, err)
		}
		p.Add(l)
		name := s.name
		if s.dropped > 0 {
			name += fmt.Sprintf(" (%d not finite)", s.dropped)
		}
		if len(s.data) == 1 { // a line of one point draws nothing
			sc, err := plotter.NewScatter(s.data)
			if err != nil {
				return fmt.Errorf("plots: %s loss: %w", s.name, err)
			}
			sc.Color = s.color
			sc.Shape = draw.CircleGlyph{}
			p.Add(sc)
			leg.Add(name, l, sc)
			continue
		}
		leg.Add(name, l)
	}
	padRange(&p.X, 0)
	padRange(&p.Y, 0.03)
	return save(dir, "loss", p, leg)
}

// Accuracy writes DIR/accuracy.png and DIR/accuracy.svg: held-out accuracy
// at each evaluation, a point and line per evaluation. Each Point's Step is
// the training step and its Value the fraction correct, 0 to 1; the axis
// shows percent. It returns an
// error wrapping ErrNoData when acc has no finite value.
func Accuracy(dir, title string, acc []Point) error {
	data, dropped := xys(acc, 100)
	if len(data) == 0 {
		return fmt.Errorf("%w: no accuracy with a finite value (%d points)", ErrNoData, len(acc))
	}
	p := newPlot(title, "step", "held-out accuracy (%)")
	p.X.Tick.Marker = ticks{integer: true}
	l, err := line(data, trainColor, vg.Points(1.5))
	if err != nil {
		return fmt.Errorf("plots: accuracy: %w", err)
	}
	sc, err := plotter.NewScatter(data)
	if err != nil {
		return fmt.Errorf("plots: accuracy: %w", err)
	}
	sc.Color = trainColor
	sc.Shape = draw.CircleGlyph{}
	sc.Radius = vg.Points(3)
	p.Add(l, sc)
	best := data[0]
	for _, d := range data {
		if d.Y > best.Y {
			best = d
		}
	}
	name := "test"
	if dropped > 0 {
		name += fmt.Sprintf(" (%d not finite)", dropped)
	}
	leg := newLegend()
	leg.Add(name, l, sc)
	leg.Add(fmt.Sprintf("best %.2f%% (step %d)", best.Y, int(best.X)))
	padRange(&p.X, 0.03) // room for the first and last dots
	padRange(&p.Y, 0.03)
	if p.Y.Max > 100 && best.Y <= 100 {
		p.Y.Max = 100
	}
	return save(dir, "accuracy", p, leg)
}

// padRange widens a degenerate axis range (one point, or a flat series) so
// that gonum/plot can draw it, and otherwise adds margin (a fraction of the
// range) on both sides so that a curve does not run along the frame.
func padRange(a *plot.Axis, margin float64) {
	lo, hi := a.Min, a.Max
	if hi <= lo {
		d := math.Max(math.Abs(lo)*0.05, 0.5)
		a.Min, a.Max = lo-d, hi+d
		return
	}
	m := (hi - lo) * margin
	a.Min, a.Max = lo-m, hi+m
}
