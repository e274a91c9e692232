package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"ferry/internal/plots"
	"ferry/trace"
	"ferry/train"
)

// writePlots draws the run's loss curves, accuracy per evaluation (MNIST)
// and one step's device memory by category into dir, as PNG and SVG, and
// returns the files written.
func writePlots(dir, title string, h *history, rec *trace.Recorder, device string) ([]string, error) {
	var files []string
	add := func(err error, names ...string) error {
		if errors.Is(err, plots.ErrNoData) {
			return nil // nothing to draw (an interrupted run, say)
		}
		if err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
		for _, n := range names {
			files = append(files, filepath.Join(dir, n))
		}
		return nil
	}
	pts := func(ps []train.Point) []plots.Point {
		out := make([]plots.Point, len(ps))
		for i, p := range ps {
			out[i] = plots.Point{Step: p.Step, Value: p.Value}
		}
		return out
	}
	yLabel := "loss (nats per token)"
	if len(h.Accuracy) > 0 {
		yLabel = "loss (nats per example)"
	}
	// The per-step training loss is noisy: draw its exponential moving
	// average (the progress bar's), as TensorBoard's smoothing does.
	smooth := pts(h.Train)
	for i := 1; i < len(smooth); i++ {
		smooth[i].Value = 0.9*smooth[i-1].Value + 0.1*smooth[i].Value
	}
	if err := add(plots.LossCurves(dir, title, yLabel, smooth, pts(h.Val)), "loss.png", "loss.svg"); err != nil {
		return nil, err
	}
	if len(h.Accuracy) > 0 {
		if err := add(plots.Accuracy(dir, title, pts(h.Accuracy)), "accuracy.png", "accuracy.svg"); err != nil {
			return nil, err
		}
	}
	if rec != nil {
		if err := add(plots.MemoryOverStep(dir, title, rec.Samples(device)),
			"memory.png", "memory.svg"); err != nil {
			return nil, err
		}
	}
	return files, nil
}
