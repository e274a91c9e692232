package train

import (
	"fmt"
	"time"

	"ferry/device"
)

// finish is the last phase: it settles the updates still running, calls
// Hooks.Done, checkpoints a run that was interrupted or stopped (unless
// its last step's checkpoint is written), fills in the result's timings,
// best metrics and memory statistics, and hands the run to the Plotter.
func (r *run) finish() (*Result, error) {
	res := r.res
	if err := r.settle(); err != nil {
		return nil, fmt.Errorf("step %d: %w", res.Steps, err)
	}
	if h := r.cfg.Hooks; h.Done != nil {
		h.Done()
	}
	if (res.Interrupted || res.Stopped) && r.ckpt != nil && res.Steps >= r.first && res.Checkpoint != r.ckpt.PathFor(res.Steps) {
		if err := r.save(res.Steps, true); err != nil {
			return nil, fmt.Errorf("writing the final checkpoint: %w", err)
		}
	} else if r.pending != 0 && r.pending == res.Steps {
		// Stopped right after a checkpoint written before its proof:
		// prove it now, so that latest names it.
		if err := r.proveWeights(res.Steps); err != nil {
			return nil, err
		}
		if err := r.provePending(); err != nil {
			return nil, fmt.Errorf("step %d: %w", res.Steps, err)
		}
	}
	res.WallSeconds = time.Since(r.start).Seconds()
	res.StepSeconds = Median(r.stepTimes)
	if res.WallSeconds > 0 {
		res.ItemsPerSecond = float64(res.Items) / res.WallSeconds
	}
	for _, m := range res.Metrics {
		res.Best = append(res.Best, r.best[m.Name])
	}
	st := r.alloc.Stats()
	res.PeakBytes = map[string]int64{}
	for c := device.Category(0); c < device.NumCategories; c++ {
		res.PeakBytes[c.String()] = st.ByCategory[c].Peak
	}
	res.PeakTotalBytes = st.AllocatedBytes.Peak
	if s, ok := r.mem.Stats(); ok {
		res.Offload = &s
	}
	if r.full != nil {
		// ZeRO-3: the run ends with whole parameters, the model's again
		// (a sample, an export, the caller's use), gathered after the
		// peaks above were read: they are the run's, sharded.
		if err := r.full.Unshard(); err != nil {
			return nil, fmt.Errorf("step %d: gathering the parameters: %w", res.Steps, err)
		}
	}
	if r.cfg.Plots != nil {
		files, err := r.cfg.Plots.Plot(r.plotData())
		if err != nil {
			return nil, err
		}
		res.Plots = files
	}
	return res, nil
}

// plotData is what the Plotter draws of this run.
func (r *run) plotData() PlotData {
	d := PlotData{History: r.hist, Device: r.dev.Name()}
	if t, ok := r.task.(Describer); ok {
		d.Title = t.Title()
	}
	if r.rec != nil {
		d.Memory = r.rec.Samples(d.Device)
	}
	return d
}
