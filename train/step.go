package train

import (
	"fmt"
	"math"

	"ferry"
	"ferry/device"
	"ferry/nn"
	"ferry/optim"
)

// step runs one optimizer step: Accum micro-batches forward and backward
// under the memory mode, then clipping and the optimizer. It returns the
// mean loss and the items trained on. A loss or gradient that is not
// finite stops the step before the optimizer changes anything.
func (t *Trainer) step(step int) (loss float64, items int64, err error) {
	h, model := t.cfg.Hooks, t.task.Model()
	if h.StepStart != nil {
		h.StepStart(step)
	}
	if err := t.mem.BeginStep(); err != nil {
		return 0, 0, err
	}
	if t.full != nil {
		if err := t.full.BeginStep(); err != nil {
			return 0, 0, err
		}
	}
	for micro := 0; micro < t.cfg.Accum; micro++ {
		l, n, err := t.micro(model, step, micro)
		if err != nil {
			return 0, 0, err
		}
		loss += l
		items += int64(n)
	}
	if !t.mem.OptimizerInBackward() {
		if err := t.update(model, step); err != nil {
			return 0, 0, err
		}
	}
	if err := t.mem.EndStep(); err != nil {
		return 0, 0, err
	}
	if t.full != nil {
		if err := t.full.EndStep(); err != nil {
			return 0, 0, err
		}
	}
	if h.StepEnd != nil {
		h.StepEnd(step)
	}
	return loss, items, nil
}

// micro runs micro-batch micro of step, forward and backward on one tape
// (and, with the optimizer inside backward, the updates). It returns the
// micro-batch's loss divided by Accum, and its items. A failed step's
// gradients are dropped.
func (t *Trainer) micro(model nn.Module, step, micro int) (loss float64, items int, err error) {
	accum := t.cfg.Accum
	nn.SetStep(model, uint64((step-1)*accum+micro+1))
	x, y, items, err := t.batch(step, micro)
	if err != nil {
		return 0, 0, err
	}
	err = ferry.Step(func(tape *ferry.Tape) error {
		l := t.forward(tape, step, micro, x, y)
		scaled := l
		if accum > 1 {
			scaled = ferry.Scale(l, 1/float32(accum))
		}
		if t.mem.OptimizerInBackward() {
			// Parameters change inside backward: the loss is read,
			// and checked, before.
			if loss, err = lossValue(l, accum); err != nil {
				return err
			}
			if t.full != nil {
				return t.backwardBeside(step, scaled)
			}
			return t.backwardUpdating(step, scaled)
		}
		switch {
		case t.full != nil:
			// Every backward frees each gathered parameter as its
			// gradient completes; the last micro-batch's also
			// reduce-scatters the gradients.
			t.full.SetReduce(micro == accum-1)
			err = scaled.BackwardWith(ferry.BackwardOptions{GradReady: t.full.GradReady})
		case t.red != nil && micro == accum-1:
			// The buckets' all-reduces start as backward completes
			// them, overlapping the rest of backward.
			err = scaled.BackwardWith(ferry.BackwardOptions{GradReady: t.red.GradReady})
		default:
			err = t.mem.Backward(scaled, ferry.BackwardOptions{})
		}
		if err != nil {
			return err
		}
		// Read after backward is queued, so that reading it does not
		// hold the device between forward and backward.
		loss, err = lossValue(l, accum)
		return err
	})
	x.Release()
	y.Release()
	if err != nil {
		_ = t.mem.Settle() // no update runs beside while the gradients go
		t.optimizer().ZeroGrad()
		return 0, 0, err
	}
	return loss, items, nil
}

// forward runs the task's model on x under the memory mode and precision
// and returns the loss against y.
func (t *Trainer) forward(tape *ferry.Tape, step, micro int, x, y *ferry.Tensor) *ferry.Tensor {
	h := t.cfg.Hooks
	xin := tape.Input(x)
	if t.full != nil {
		t.full.Attach(tape) // gathered parameters leave after their ops
	}
	if h.ForwardStart != nil {
		h.ForwardStart(step, micro)
	}
	var out *ferry.Tensor
	forward := func() {
		tape.Autocast(t.cfg.Precision, func() { out = t.task.Forward(tape, xin, t.mem.Recompute()) })
	}
	var l *ferry.Tensor
	if t.mem.HooksOverLoss() {
		// The hooks see the loss's saves too, as the planner records a
		// step.
		t.mem.Begin(tape)
		forward()
		if h.ForwardEnd != nil {
			h.ForwardEnd(step, micro)
		}
		l = t.task.Loss(out, tape.Input(y))
		t.mem.End(tape)
	} else {
		t.mem.Forward(tape, forward)
		if h.ForwardEnd != nil {
			h.ForwardEnd(step, micro)
		}
		l = t.task.Loss(out, tape.Input(y))
	}
	out.Release()
	return l
}

// lossValue is l's value divided by accum, or an error wrapping
// ErrNonFinite; 0 on the meta device, which holds shapes and no values.
func lossValue(l *ferry.Tensor, accum int) (float64, error) {
	if !device.HasData(l.Device()) {
		return 0, nil
	}
	lv := float64(l.Item())
	if math.IsNaN(lv) || math.IsInf(lv, 0) {
		return 0, fmt.Errorf("the loss is %v (%w); lower the learning rate or clip gradients", lv, ErrNonFinite)
	}
	return lv / float64(accum), nil
}

// backwardUpdating runs backward with the optimizer inside it: each
// parameter is updated as its gradient completes (Hooks.GradReady sees it
// first). The updates that run beside the device may outlast it; the
// next step's backward, or settle, reports their errors.
func (t *Trainer) backwardUpdating(step int, scaled *ferry.Tensor) error {
	opts, e := optim.InBackward(t.optimizer().(optim.Stepper))
	if h := t.cfg.Hooks; h.GradReady != nil {
		update := opts.GradReady
		opts.GradReady = func(p *ferry.Tensor) { h.GradReady(step, p); update(p) }
	}
	err := t.mem.Backward(scaled, opts)
	// The last step's updates beside the device had all run when this
	// backward began.
	if last := t.updates; err == nil && last != nil {
		err = last.Err()
	}
	t.updates = e
	if err != nil {
		return err
	}
	return e.Err()
}

// backwardBeside is backwardUpdating under ZeRO-3 (a policy's updates
// inside backward, the optimizer's state on the host): backward
// reduce-scatters each gradient as it completes, and each shard steps, at
// this step's learning rate, beside the device once its mean has landed
// (dist.FullShard.SetStepBeside). The step does not wait for the
// updates: each parameter's next gather waits for its shard's, and the
// Trainer's reads of the shards or the state (a checkpoint, the end of
// the run) for all of them; the next Wait reports their errors.
func (t *Trainer) backwardBeside(step int, scaled *ferry.Tensor) error {
	opts, e := optim.InBackward(t.fullOpt.Inner())
	if err := t.full.SetStepBeside(func(s *ferry.Tensor) error { opts.GradReady(s); return e.Err() }); err != nil {
		return err
	}
	hook := t.full.GradReady
	if h := t.cfg.Hooks; h.GradReady != nil {
		hook = func(p *ferry.Tensor) { h.GradReady(step, p); t.full.GradReady(p) }
	}
	t.full.SetReduce(true)
	if err := scaled.BackwardWith(ferry.BackwardOptions{GradReady: hook}); err != nil {
		return err
	}
	return t.full.Wait()
}

// update applies the step's gradients, once every micro-batch's are in:
// the ranks' mean first, then clipping and the optimizer.
func (t *Trainer) update(model nn.Module, step int) error {
	cfg, opt := t.cfg, t.optimizer()
	if t.red != nil {
		if err := t.red.Wait(); err != nil { // the gradients are now the ranks' mean
			return err
		}
	}
	params := model.Parameters()
	if cfg.Hooks.GradsReady != nil {
		cfg.Hooks.GradsReady(step, params)
	}
	if cfg.Clip > 0 {
		if err := t.clip(params); err != nil {
			opt.ZeroGrad()
			return err
		}
	}
	if err := opt.Step(); err != nil {
		return err
	}
	opt.ZeroGrad()
	return nil
}

// clip clips the gradients to Config.Clip. A non-finite norm stops the
// step before the optimizer writes it into the weights. (Without
// clipping, a non-finite gradient shows as the next step's loss, and a
// checkpoint refuses non-finite weights, so the last good one stays.)
func (t *Trainer) clip(params []*ferry.Tensor) error {
	clip := optim.ClipGradNorm
	switch {
	case t.shard != nil && t.cfg.Shard == 2: // each rank holds its own gradients only
		clip = func(_ []*ferry.Tensor, max float64) (float64, error) { return t.shard.ClipGradNorm(max) }
	case t.full != nil: // each rank holds its shards' gradients
		clip = func(_ []*ferry.Tensor, max float64) (float64, error) { return t.full.ClipGradNorm(max) }
	}
	norm, err := clip(params, t.cfg.Clip)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return fmt.Errorf("the gradients' norm is %v (%w); lower the learning rate", norm, ErrNonFinite)
	}
	return err
}
