package demo

import (
	"ferry"
	"ferry/device"
	"ferry/device/meta"
	"ferry/optim"
	"ferry/plan"
)

// PlanModel is the demo's workload as the planner sees it: the step of
// mode policy (runMode), op for op, so that a plan's predicted figures
// are what `ferry demo --device meta --policy FILE` measures.
func PlanModel(cfg Config) plan.Model { return planModel{cfg} }

type planModel struct{ cfg Config }

func (m planModel) String() string {
	w, err := m.cfg.Family.Workload(meta.New(device.Options{}, nil), m.cfg.sizes(), m.cfg.Seed)
	if err != nil {
		return m.cfg.Family.Name()
	}
	defer w.Release()
	return w.Describe()
}

func (m planModel) Build(dev device.Device, inBackward bool) (*plan.Step, error) {
	cfg := m.cfg
	w, err := cfg.Family.Workload(dev, cfg.sizes(), cfg.Seed)
	if err != nil {
		return nil, err
	}
	opt := w.Optimizer(cfg.LR)
	var input, target *ferry.Tensor
	if err := ferry.Catch(func() error { input, target = w.Data(dev, cfg.Seed); return nil }); err != nil {
		opt.Release()
		w.Release()
		return nil, err
	}
	release := func() {
		input.Release()
		target.Release()
		opt.Release()
		w.Release()
	}
	run := func(tape *ferry.Tape) error {
		x := tape.Input(input)
		y := w.Forward(tape, x, false)
		l := w.Loss(y, tape.Adopt(target.To(dev)))
		y.Release() // as the Trainer does: the loss keeps what it saved
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

// Smaller is the family's smaller sizes (a smaller batch, a shorter
// sequence, …), each as a model to plan.
func (m planModel) Smaller() []plan.Variant {
	w, err := m.cfg.Family.Workload(meta.New(device.Options{}, nil), m.cfg.sizes(), m.cfg.Seed)
	if err != nil {
		return nil
	}
	defer w.Release()
	var vs []plan.Variant
	for _, v := range w.Smaller() {
		c := m.cfg
		c.Sizes = v.Sizes
		vs = append(vs, plan.Variant{Change: v.Change, Model: planModel{c}})
	}
	return vs
}
