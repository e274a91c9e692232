package train

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"ferry/trace"
	"ferry/trace/plots"
)

// writePlots draws the run's loss curves (the training loss smoothed, and
// the first lower-is-better metric), each higher-is-better metric over
// steps, and one step's device memory by category into dir, as PNG and
// SVG, and returns the files written.
func writePlots(dir, title string, h *History, rec *trace.Recorder, device string) ([]string, error) {
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
	pts := func(ps []Point) []plots.Point { return append([]plots.Point(nil), ps...) }
	better := h.Better
	names := make([]string, 0, len(h.Evals))
	for n := range h.Evals {
		names = append(names, n)
	}
	sort.Strings(names)
	var val []Point
	for _, n := range names {
		if better[n] == Lower && val == nil {
			val = h.Evals[n]
		}
	}
	// The per-step training loss is noisy: draw its exponential moving
	// average (the progress bar's), as TensorBoard's smoothing does.
	smooth := pts(h.Train)
	for i := 1; i < len(smooth); i++ {
		smooth[i].Value = 0.9*smooth[i-1].Value + 0.1*smooth[i].Value
	}
	if err := add(plots.LossCurves(dir, title, "loss", smooth, pts(val)), "loss.png", "loss.svg"); err != nil {
		return nil, err
	}
	for _, n := range names {
		if better[n] == Higher {
			if err := add(plots.Accuracy(dir, title, pts(h.Evals[n])), "accuracy.png", "accuracy.svg"); err != nil {
				return nil, err
			}
			break
		}
	}
	if rec != nil {
		if err := add(plots.Memory(dir, "memory", title, rec.Samples(device)), "memory.png", "memory.svg"); err != nil {
			return nil, err
		}
	}
	return files, nil
}
