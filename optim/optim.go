// Package optim updates parameters from their gradients. Optimizers are
// plug-ins registered by name (Register, New, Names): SGD and AdamW with
// PyTorch's update rules, AdamW8bit (both moments block-wise quantised to
// 8 bits, as bitsandbytes' and torchao's) and Lion. Each is an Algorithm
// — its hyperparameters, the state it keeps per parameter and its update
// written once as a Go loop — embedded in an Engine that does the rest:
// the state's lifetime and placement, the update's path to the device
// (a fused kernel where the device has one, Note [update paths]), in-
// backward updates, and saving and restoring the state. Everything above
// optim (the planner, the Trainer, checkpoints, ZeRO) asks an optimizer
// through these interfaces and never names its type.
//
// Optimizer state is allocated on the parameter's device on the first
// step, counted as optimizer state in the allocator's statistics, and kept
// until Release. With OnHost it is kept in host memory instead and the
// update runs on the host (host.go).
package optim

import (
	"sync"

	"ferry"
)

// Optimizer is what every optimizer has: every optimizer of this package
// is one (through Engine), and so is dist.ShardedOptimizer.
type Optimizer interface {
	// Name is the name it is registered under ("adamw"); Hyper its
	// hyperparameters other than the learning rate (see Algorithm): with
	// the learning rate, what a training run's identity records.
	Name() string
	Hyper() map[string]any
	// Step updates every parameter that has a gradient.
	Step() error
	// LR is the learning rate the next Step uses; SetLR changes it (a
	// schedule calls it before each step).
	LR() float64
	SetLR(lr float64)
	// ZeroGrad drops the parameters' gradients, freeing their memory
	// (PyTorch: zero_grad(set_to_none=True), the default).
	ZeroGrad()
	// Release frees the optimizer's state.
	Release()
}

// Stepper is an optimizer that can update one parameter at a time.
type Stepper interface {
	Optimizer
	// StepParam updates p from its gradient, if p is one of the
	// optimizer's parameters and has a gradient; otherwise it does nothing.
	StepParam(p *ferry.Tensor) error
}

// InBackward returns options for Backward that update each parameter as
// soon as its gradient is complete and then drop the gradient, so that
// gradients never all exist at once (torchtune's optimizer_in_bwd). For
// every optimizer of this package the result equals Backward followed by
// Step and ZeroGrad.
// The first error stops further updates and is returned by Err.
//
// The updates use the learning rate the optimizer has when InBackward is
// called, and GradReady may run on another goroutine than the caller's
// (offload.Streamer's host worker, whose updates may still run while the
// caller sets the next step's rate): SetLR is not read by it.
func InBackward(opt Stepper) (ferry.BackwardOptions, *InBackwardErr) {
	e := &InBackwardErr{}
	step := opt.StepParam
	if o, ok := opt.(lrStepper); ok {
		lr := float32(opt.LR())
		o.buildIndex() // here, not on the goroutines GradReady runs on
		step = func(p *ferry.Tensor) error { return o.stepParamLR(p, lr) }
	}
	opts := ferry.BackwardOptions{GradReady: func(p *ferry.Tensor) {
		if e.Err() != nil {
			return
		}
		if err := step(p); err != nil {
			e.set(err)
			return
		}
		p.SetGrad(nil)
	}}
	if a, ok := opt.(aheadStepper); ok {
		opts.GradComplete = a.gradComplete
	}
	return opts, e
}

// aheadStepper is an optimizer of this package that prepares updates
// ahead of them (Engine.gradComplete).
type aheadStepper interface{ gradComplete(p *ferry.Tensor) }

// lrStepper is an optimizer of this package: it steps a parameter at a
// given learning rate.
type lrStepper interface {
	stepParamLR(p *ferry.Tensor, lr float32) error
	buildIndex()
}

// InBackwardErr holds the first error an in-backward update met. It is
// safe for concurrent use.
type InBackwardErr struct {
	mu  sync.Mutex
	err error
}

func (e *InBackwardErr) set(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = err
	}
}

// Err returns the first error, or nil. Updates that run beside the device
// (offload.Streamer) report theirs once they have run: after the
// Streamer's Settle, or the next step's backward.
func (e *InBackwardErr) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// unique drops repeated parameters, keeping the first of each: a tensor
// listed twice (a tied weight) is one parameter, updated once per step, as
// PyTorch's parameters() deduplicates.
func unique(params []*ferry.Tensor) []*ferry.Tensor {
	seen := make(map[*ferry.Tensor]bool, len(params))
	out := make([]*ferry.Tensor, 0, len(params))
	for _, p := range params {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
