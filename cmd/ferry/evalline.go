package main

import "ferry/train"

// evalLines prints a train run's validation lines, "step N: train loss
// L, val loss V", with L the (smoothed) train loss of step N itself. The
// Trainer evaluates after a step and hands the step to Hooks.Step after
// that, so at Hooks.Eval the last loss seen is the step before's (and
// none at all after one step): a line waits for its step's report. Either
// order of the two hooks gives the same line.
type evalLines struct {
	p        *progress
	step     int     // the last step Hooks.Step reported
	smoothed float64 // its smoothed loss
	pending  string  // an evaluation's metrics, waiting for step pendingAt
	// pendingAt is the step whose evaluation is pending (0: none).
	pendingAt int
}

// eval takes Hooks.Eval's metrics.
func (e *evalLines) eval(step int, ms []train.Metric) {
	switch {
	case step == 0:
		e.p.line("step 0: %s", formatMetricList(ms))
	case step == e.step:
		e.print(step, formatMetricList(ms))
	default:
		e.flush()
		e.pending, e.pendingAt = formatMetricList(ms), step
	}
}

// stepDone takes a step's report (Hooks.Step), before anything else
// prints it, and prints the evaluation waiting for it.
func (e *evalLines) stepDone(s train.StepInfo) {
	e.step, e.smoothed = s.Step, s.Smoothed
	if e.pendingAt == s.Step {
		e.flush()
	}
}

// flush prints a pending evaluation with the last loss seen (at the end
// of a run whose step was never reported).
func (e *evalLines) flush() {
	if e.pendingAt > 0 {
		e.print(e.pendingAt, e.pending)
		e.pending, e.pendingAt = "", 0
	}
}

func (e *evalLines) print(step int, metrics string) {
	if e.step == 0 { // no step reported yet: no train loss to show
		e.p.line("step %d: %s", step, metrics)
		return
	}
	e.p.line("step %d: train loss %.4f, %s", step, e.smoothed, metrics)
}
