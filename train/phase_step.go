package train

import (
	"context"
	"fmt"
	"math"
	"time"

	"ferry/trace"
)

// begin starts the steps: the peak statistics, the clock, the loss's
// moving average and the best metrics (a resumed run continues its
// curve's and its evaluations'), then an evaluation before the first
// step of a fresh run, and Hooks.Start.
func (r *run) begin() error {
	r.alloc.ResetPeak()
	r.memStep = r.memoryStep(r.first)
	r.start = time.Now()
	r.smoothed = math.NaN()
	r.best = bestOf(r.hist) // a resumed run's evaluations count
	if len(r.hist.Train) > 0 {
		r.smoothed = r.hist.Train[0].Value
		for _, p := range r.hist.Train[1:] {
			r.smoothed = 0.9*r.smoothed + 0.1*p.Value
		}
	}
	r.logEvery = r.cfg.LogEvery
	if r.logEvery == 0 {
		r.logEvery = max(1, r.cfg.Steps/50)
	}
	if r.first == 1 {
		ms, err := r.evaluate(0)
		if err != nil {
			return err
		}
		r.res.Metrics = ms
		if ms != nil {
			if err := r.log.write(map[string]any{"step": 0, "eval": metricMap(ms)}); err != nil {
				return err
			}
		}
	}
	if h := r.cfg.Hooks; h.Start != nil {
		h.Start(r.first, r.cfg.Steps)
	}
	return nil
}

// stopBefore says whether the run ends before step: ctx was cancelled
// (on any rank: Result.Interrupted) or this run has done StopAfter steps
// (Result.Stopped).
func (r *run) stopBefore(ctx context.Context, step int) (bool, error) {
	stop, err := r.agreeStop(ctx.Err() != nil)
	if err != nil {
		return false, fmt.Errorf("step %d: %w", step, err)
	}
	if stop {
		r.res.Interrupted = true
		return true, nil
	}
	if r.cfg.StopAfter > 0 && step >= r.first+r.cfg.StopAfter {
		r.res.Stopped = true
		return true, nil
	}
	return false, nil
}

// trainStep sets the step's learning rate, runs the step (recording its
// device allocations if it is memStep), and adds it to the result and
// the loss curve.
func (r *run) trainStep(step int) (StepInfo, error) {
	lr := r.opt.LR()
	if r.cfg.Schedule != nil {
		lr = r.cfg.Schedule.At(step)
		r.opt.SetLR(lr)
	}
	var stopRec func()
	if step == r.memStep {
		r.rec = trace.New(nil)
		stopRec = r.rec.Allocator(r.dev.Name(), r.alloc)
	}
	t0 := time.Now()
	loss, items, err := r.step(step)
	if stopRec != nil {
		stopRec()
	}
	if err == nil {
		loss, items, err = r.reduceStep(step, loss, items)
	}
	if err != nil {
		// Nothing of this step reaches a checkpoint: the optimizer has
		// not run (or, in backward, the step stops at the first error).
		return StepInfo{}, fmt.Errorf("step %d: %w", step, err)
	}
	r.stepTimes = append(r.stepTimes, time.Since(t0).Seconds())
	res := r.res
	res.Items += items
	res.Steps, res.LastLoss = step, loss
	if math.IsNaN(r.smoothed) {
		r.smoothed = loss
	} else {
		r.smoothed = 0.9*r.smoothed + 0.1*loss
	}
	res.SmoothedLoss = r.smoothed
	r.hist.Train = append(r.hist.Train, Point{Step: step, Value: loss})
	elapsed := time.Since(r.start).Seconds()
	return StepInfo{Step: step, Total: r.cfg.Steps, Loss: loss, Smoothed: r.smoothed, LR: lr, Elapsed: elapsed,
		ItemsPerSecond: float64(res.Items) / elapsed, DeviceBytes: r.alloc.Allocated()}, nil
}

// report hands a finished step to Hooks.Step and, at the end of a
// logging interval (or with an evaluation, or at the last step), writes
// its log record.
func (r *run) report(info StepInfo, evals []Metric) error {
	step := info.Step
	info.Log = step%r.logEvery == 0 || evals != nil || step == r.cfg.Steps
	if h := r.cfg.Hooks; h.Step != nil {
		h.Step(info)
	}
	if !info.Log {
		return nil
	}
	rec := map[string]any{"step": step, "loss": info.Loss, "smoothed_loss": info.Smoothed, "lr": info.LR,
		r.cfg.Unit + "_per_second": info.ItemsPerSecond, "elapsed_seconds": info.Elapsed, "device_bytes": info.DeviceBytes}
	if evals != nil {
		rec["eval"] = metricMap(evals)
	}
	return r.log.write(rec)
}
