// Package plot draws a training run's charts as PNG and SVG files: the
// train.Plotter that `ferry train --plot DIR` attaches. It is a package
// of its own so that the training loop does not link the plotting
// library (gonum/plot and its fonts): a program that wants charts
// imports it and sets train.Config.Plots,
//
//	cfg.Plots = plot.Writer{Dir: "plots"}
//
// and the Trainer then checks the directory in train.New, records one
// warm step's device memory, and calls Plot once at the end of the run
// (rank 0 only). Result.Plots lists the files written.
package plot

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"ferry/internal/fsx"
	"ferry/trace/plots"
	"ferry/train"
)

// Writer writes a run's charts into Dir, as PNG and SVG:
//
//	loss      the training loss (its moving average, as the progress
//	          line shows it) and the first lower-is-better metric
//	accuracy  the first higher-is-better metric, if any
//	memory    one step's device memory by category, if recorded
//
// A chart with nothing to draw (an interrupted run's, say) is skipped.
type Writer struct {
	Dir string
}

var _ train.Plotter = Writer{}

// Check makes sure Dir is, or can be made as, a writable directory; one
// it made for the check it removes again.
func (w Writer) Check() error { return fsx.CheckWritableDir(w.Dir) }

// Plot writes the charts of d and returns the files written.
func (w Writer) Plot(d train.PlotData) ([]string, error) {
	dir, h := w.Dir, d.History
	var files []string
	add := func(err error, names ...string) error {
		if errors.Is(err, plots.ErrNoData) {
			return nil // nothing to draw (an interrupted run, say)
		}
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		for _, n := range names {
			files = append(files, filepath.Join(dir, n))
		}
		return nil
	}
	names := make([]string, 0, len(h.Evals))
	for n := range h.Evals {
		names = append(names, n)
	}
	sort.Strings(names)
	var val []train.Point
	for _, n := range names {
		if h.Better[n] == train.Lower && val == nil {
			val = h.Evals[n]
		}
	}
	// The per-step training loss is noisy: draw its exponential moving
	// average (the progress bar's), as TensorBoard's smoothing does.
	smooth := points(h.Train)
	for i := 1; i < len(smooth); i++ {
		smooth[i].Value = 0.9*smooth[i-1].Value + 0.1*smooth[i].Value
	}
	if err := add(plots.LossCurves(dir, d.Title, "loss", smooth, points(val)), "loss.png", "loss.svg"); err != nil {
		return nil, err
	}
	for _, n := range names {
		if h.Better[n] == train.Higher {
			if err := add(plots.Accuracy(dir, d.Title, points(h.Evals[n])), "accuracy.png", "accuracy.svg"); err != nil {
				return nil, err
			}
			break
		}
	}
	if d.Memory != nil {
		if err := add(plots.Memory(dir, "memory", d.Title, d.Memory), "memory.png", "memory.svg"); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// points copies a curve into the plotting package's type.
func points(ps []train.Point) []plots.Point {
	if len(ps) == 0 {
		return nil
	}
	out := make([]plots.Point, len(ps))
	for i, p := range ps {
		out[i] = plots.Point{Step: p.Step, Value: p.Value}
	}
	return out
}
