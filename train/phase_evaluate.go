package train

import (
	"fmt"
	"math"

	"ferry/nn"
)

// evaluateAt evaluates after step when it is time: every EvalEvery steps
// and at the last. The metrics become the result's latest; none when it
// is not time or the task is no Evaluator.
func (r *run) evaluateAt(step int) ([]Metric, error) {
	if !((r.cfg.EvalEvery > 0 && step%r.cfg.EvalEvery == 0) || step == r.cfg.Steps) {
		return nil, nil
	}
	ms, err := r.evaluate(step)
	if err != nil {
		return nil, err
	}
	if ms != nil {
		r.res.Metrics = ms
	}
	return ms, nil
}

// evaluate runs the task's Evaluator with the model in evaluation mode
// and settles the updates still running beside the device, then adds the
// metrics to the history and the best values; Hooks.Eval sees them.
func (r *run) evaluate(step int) ([]Metric, error) {
	ev, ok := r.task.(Evaluator)
	if !ok {
		return nil, nil
	}
	nn.SetTraining(r.model, false)
	defer nn.SetTraining(r.model, true)
	if ta, ok := r.task.(TapeAttacher); ok {
		ta.AttachTapes(r.attach)
	}
	// Under ZeRO-3 the forwards gather each parameter as they use it: on
	// tapes with the hook (a TapeAttacher) every rank must run the same
	// forwards, as a ShardEvaluator's shares of one process's batches do.
	ms, err := r.evaluateTask(ev) // on several ranks, this rank's share (evalshard.go)
	if serr := r.settleGathered(); err == nil {
		err = serr
	}
	if err == nil {
		err = r.settle()
	}
	if err != nil {
		return nil, fmt.Errorf("evaluation at step %d: %w", step, err)
	}
	// A metric that is not finite means weights that diverged (or a
	// broken evaluation): the run stops before it saves them.
	for _, m := range ms {
		if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
			return nil, fmt.Errorf("evaluation at step %d: %s is %v (%w): the run diverged; nothing of this step was saved, "+
				"and latest still names the last good checkpoint. Lower --lr or set --clip (e.g. --clip 1), then --resume", step, m.Name, m.Value, ErrNonFinite)
		}
	}
	r.evaluated = step
	for _, m := range ms {
		b, seen := r.best[m.Name]
		if !seen || (m.Better == Higher && m.Value > b.Value) || (m.Better == Lower && m.Value < b.Value) {
			r.best[m.Name] = m
		}
		r.hist.Evals[m.Name] = append(r.hist.Evals[m.Name], Point{Step: step, Value: m.Value})
		r.hist.Better[m.Name] = m.Better
	}
	if h := r.cfg.Hooks; h.Eval != nil {
		h.Eval(step, ms)
	}
	return ms, nil
}
