package train

import "ferry/trace"

// Plotter draws a run's charts: an opt-in hook (Config.Plots), so that
// the training loop links no plotting library. Package train/plot holds
// the one `ferry train --plot` attaches, which writes PNG and SVG files.
//
// Only rank 0 of a data-parallel run uses it (the other ranks drop it),
// and always on the training goroutine:
//
//   - Check, once in New before any training work, says whether the
//     Plotter can work (its directory is writable, say); an error refuses
//     the run as a ConfigError for the field Plots. Check must leave no
//     trace: nothing may have changed when the run later fails.
//   - Plot, once at the end of a run that did not fail (interrupted and
//     stopped runs included), draws data and returns the files it wrote,
//     which the Result lists (Result.Plots). An error fails the run; the
//     checkpoints written stay.
//
// While a Plotter is set the Trainer records one step's device
// allocations for it (PlotData.Memory); without one it records nothing.
type Plotter interface {
	Check() error
	Plot(data PlotData) (files []string, err error)
}

// PlotData is what a Plotter draws. It belongs to the Trainer: the
// Plotter may read it during Plot and must not keep it (History is the
// Result's).
type PlotData struct {
	// Title is the task's (Describer), or "".
	Title string
	// History is the run's curves from step 1, a resumed run's included.
	History *History
	// Device is the name of the device trained on.
	Device string
	// Memory is the device's allocations by category over one warm step
	// of this run (its second, or its only one); nil when the run ended
	// before that step.
	Memory []trace.Sample
}

// memoryStep is the step whose allocations a Plotter gets: a warm one,
// not the first of this run (which makes the optimizer's state, among
// other things done once); -1 without a Plotter.
func (t *Trainer) memoryStep(first int) int {
	if t.cfg.Plots == nil {
		return -1
	}
	return min(first+1, t.cfg.Steps)
}
