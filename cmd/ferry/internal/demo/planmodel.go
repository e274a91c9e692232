package demo

import (
	"fmt"

	"ferry"
	"ferry/device"
	"ferry/optim"
	"ferry/plan"
)

// PlanModel is the demo's workload as the planner sees it: the step of
// mode policy (runMode), op for op, so that a plan's predicted figures
// are what `ferry demo --device meta --policy FILE` measures.
func PlanModel(cfg Config) plan.Model { return planModel{cfg} }

type planModel struct{ cfg Config }

func (m planModel) String() string {
	if m.cfg.Model == "gpt" {
		return describeGPT(m.cfg)
	}
	return fmt.Sprintf("%d × (Linear(%d, %d) + ReLU), batch %d", m.cfg.Layers, m.cfg.Width, m.cfg.Width, m.cfg.Batch)
}

func (m planModel) Build(dev device.Device, inBackward bool) (*plan.Step, error) {
	cfg := m.cfg
	if cfg.Model == "gpt" {
		cfg.Layers, cfg.Width = cfg.GPT.Layers, cfg.GPT.Embd
		if cfg.LR == 0 {
			cfg.LR = 3e-4
		}
	}
	w, err := newWorkload(dev, cfg)
	if err != nil {
		return nil, err
	}
	opt := w.optimizer(cfg.LR)
	var input, target *ferry.Tensor
	if err := ferry.Catch(func() error { input, target = w.data(dev, cfg.Seed); return nil }); err != nil {
		w.release()
		return nil, err
	}
	release := func() {
		input.Release()
		target.Release()
		if r, ok := opt.(releasable); ok {
			r.Release()
		}
		w.release()
	}
	run := func(tape *ferry.Tape) error {
		x := tape.Input(input)
		y := w.forward(tape, x, false, false)
		l := w.loss(y, tape.Adopt(target.To(dev)))
		if err := backwardAndStep(l, opt, inBackward, nil, nil); err != nil {
			return err
		}
		return dev.Compute().Synchronize()
	}
	return &plan.Step{Run: run, Release: release}, nil
}

// backwardAndStep runs backward from l and the optimizer, after backward
// or (inBackward) inside it. With inBackward, seen (if set) is called with
// each parameter whose gradient is complete, before it is applied;
// without, done (if set) is called between backward and the optimizer.
func backwardAndStep(l *ferry.Tensor, opt optim.Stepper, inBackward bool, seen func(p *ferry.Tensor), done func()) error {
	if inBackward {
		opts, upd := optim.InBackward(opt)
		update := opts.GradReady
		opts.GradReady = func(p *ferry.Tensor) {
			if seen != nil {
				seen(p)
			}
			update(p)
		}
		if err := l.BackwardWith(opts); err != nil {
			return err
		}
		return upd.Err()
	}
	if err := l.Backward(); err != nil {
		return err
	}
	if done != nil {
		done()
	}
	if err := opt.Step(); err != nil {
		return err
	}
	opt.ZeroGrad()
	return nil
}

// Smaller suggests halving the batch, then (GPT) the sequence.
func (m planModel) Smaller() []plan.Variant {
	var vs []plan.Variant
	for b := m.cfg.Batch / 2; b >= 1; b /= 2 {
		c := m.cfg
		c.Batch = b
		vs = append(vs, plan.Variant{Change: fmt.Sprintf("batch %d", b), Model: planModel{c}})
	}
	if m.cfg.Model == "gpt" {
		for s := m.cfg.GPT.Seq / 2; s >= 16; s /= 2 {
			c := m.cfg
			c.GPT.Seq = s
			vs = append(vs, plan.Variant{Change: fmt.Sprintf("sequence %d at batch %d", s, c.Batch), Model: planModel{c}})
		}
	}
	return vs
}
