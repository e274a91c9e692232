package train

import (
	"context"
	"fmt"
	"time"

	"ferry/device"
	"ferry/nn"
	"ferry/optim"
	"ferry/trace"
)

// Run trains until Config.Steps, StopAfter, or ctx is cancelled (then
// the step under way finishes, a checkpoint is written if asked, and the
// result says Interrupted). The error is nil for all three.
//
// A run goes through its phases in order: resume (or start afresh),
// then for each step, train it, evaluate, report and checkpoint when it
// is time, and finish. Each phase has its file (phase_*.go).
func (t *Trainer) Run(ctx context.Context) (*Result, error) {
	r := t.newRun()
	unlock, err := r.resume(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if r.log, err = openLog(t.cfg.LogPath, r.first > 1); err != nil {
		return nil, err
	}
	defer r.log.close()
	if err := r.begin(); err != nil {
		return nil, err
	}
	for step := r.first; step <= t.cfg.Steps; step++ {
		if stop, err := r.stopBefore(ctx, step); err != nil {
			return nil, err
		} else if stop {
			break
		}
		info, err := r.trainStep(step)
		if err != nil {
			return nil, err
		}
		// Its forward gave a finite loss on the weights the previous
		// step left: their checkpoint, if pending, is good.
		if err := r.provePending(); err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		evals, err := r.evaluateAt(step)
		if err != nil {
			return nil, err
		}
		if err := r.report(info, evals); err != nil {
			return nil, err
		}
		if err := r.checkpointAt(step); err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
	}
	return r.finish()
}

// run is one call of Run: what its phases share. It lives on the
// training goroutine.
type run struct {
	*Trainer
	model    nn.Module
	opt      optim.Optimizer // Trainer.optimizer
	alloc    *device.Allocator
	res      *Result
	hist     *History       // res.History
	identity map[string]any // Trainer.identity, for checkpoints
	first    int            // the first step of this run (1 unless resumed)
	// evaluated is the last step whose evaluation gave finite metrics
	// (-1: none); pending the step of a checkpoint written before its
	// weights were proven (0: none). See phase_checkpoint.go.
	evaluated, pending int
	log                *jsonLog
	logEvery           int
	best               map[string]Metric // each metric's best value so far

	start     time.Time // before the first evaluation
	stepTimes []float64 // each step's seconds
	smoothed  float64   // the loss's moving average; NaN before any

	// memStep is the step whose device allocations rec records for the
	// Plotter (-1: none).
	memStep int
	rec     *trace.Recorder
}

func (t *Trainer) newRun() *run {
	res := &Result{History: &History{Evals: map[string][]Point{}, Better: map[string]Better{}}}
	return &run{Trainer: t, model: t.task.Model(), opt: t.optimizer(), alloc: t.dev.Allocator(),
		res: res, hist: res.History, identity: t.identity(), first: 1, evaluated: -1, best: map[string]Metric{}}
}

// say sends a line for people to Hooks.Message.
func (r *run) say(format string, args ...any) {
	if h := r.cfg.Hooks; h.Message != nil {
		h.Message(fmt.Sprintf(format, args...))
	}
}
