// Package optim updates parameters from their gradients: SGD and AdamW
// with PyTorch's update rules, each step one fused kernel per parameter
// (AdamW: one launch for many parameters where the device can).
//
// Optimizer state (momentum, Adam's moments) is allocated on the
// parameter's device on the first step, counted as optimizer state in the
// allocator's statistics, and kept until Release. With OnHost it is kept
// in host memory instead and the update runs on the host (host.go).
package optim

import (
	"fmt"
	"sync"

	"ferry"
	"ferry/device"
)

// Optimizer is what SGD and AdamW have in common.
type Optimizer interface {
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

func zeroGrad(params []*ferry.Tensor) {
	for _, p := range params {
		p.SetGrad(nil)
	}
}

// stepAll updates every parameter with step.
func stepAll(params []*ferry.Tensor, step func(*ferry.Tensor) error) error {
	for _, p := range params {
		if err := step(p); err != nil {
			return err
		}
	}
	return nil
}

// stepOne updates p with step if it is one of params; *index is the set of
// params, built on first use.
func stepOne(params []*ferry.Tensor, index *map[*ferry.Tensor]bool, p *ferry.Tensor, step func(*ferry.Tensor) error) error {
	buildIndex(params, index)
	if !(*index)[p] {
		return nil
	}
	return step(p)
}

// buildIndex makes the set of params, if not made yet.
func buildIndex(params []*ferry.Tensor, index *map[*ferry.Tensor]bool) {
	if *index == nil {
		*index = make(map[*ferry.Tensor]bool, len(params))
		for _, q := range params {
			(*index)[q] = true
		}
	}
}

// stateLike allocates a zeroed tensor shaped like p, as optimizer state.
func stateLike(p *ferry.Tensor) *ferry.Tensor {
	return ferry.ZerosAs(p.Device(), device.OptimizerState, p.Shape()...)
}

func checkParam(p *ferry.Tensor) error {
	if !p.IsContiguous() {
		return fmt.Errorf("optim: parameter %q is not contiguous", p.Name())
	}
	if g := p.Grad(); g != nil && !g.IsContiguous() {
		return fmt.Errorf("optim: gradient of %q is not contiguous", p.Name())
	}
	return nil
}

// pageOut sends a parameter that lives in host memory (a HostCopier's)
// back there once the device has updated it, so that parameters do not
// gather on the device during the step.
func pageOut(p *ferry.Tensor) error {
	if hc, ok := p.Pager().(HostCopier); ok {
		_, err := hc.HostCopy(p)
		return err
	}
	return nil
}

// checkOnDevice refuses a gradient that is not on its parameter's device
// (offloaded to the host) for an optimizer whose state is on the device.
func checkOnDevice(p *ferry.Tensor) error {
	if g := p.Grad(); g != nil && g.Device() != p.Device() {
		return fmt.Errorf("optim: the gradient of %q is on %s, the parameter on %s (gradients offloaded to the host): "+
			"make the optimizer with optim.OnHost, which updates it there", p.Name(), g.Device().Name(), p.Device().Name())
	}
	return nil
}

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and (L2) weight decay (PyTorch: torch.optim.SGD).
type SGD struct {
	Params                           []*ferry.Tensor
	lr                               float32
	Momentum, Dampening, WeightDecay float32
	Nesterov                         bool
	buf                              map[*ferry.Tensor]*ferry.Tensor
	index                            map[*ferry.Tensor]bool // built on first StepParam
	host                             *hostStore             // the state, with OnHost; nil otherwise
}

// NewSGD returns plain SGD with learning rate lr; set the other fields for
// momentum and weight decay. OnHost keeps the momentum on the host.
func NewSGD(params []*ferry.Tensor, lr float32, opts ...Option) *SGD {
	params = unique(params)
	o := &SGD{Params: params, lr: lr, buf: map[*ferry.Tensor]*ferry.Tensor{}}
	if buildOptions(opts).host {
		o.host = newHostStore()
	}
	return o
}

// Step applies one update.
func (o *SGD) Step() error {
	lr := o.lr
	return stepAll(o.Params, func(p *ferry.Tensor) error { return o.step(p, lr) })
}

// StepParam updates one parameter (see Stepper).
func (o *SGD) StepParam(p *ferry.Tensor) error { return o.stepParamLR(p, o.lr) }

func (o *SGD) stepParamLR(p *ferry.Tensor, lr float32) error {
	return stepOne(o.Params, &o.index, p, func(p *ferry.Tensor) error { return o.step(p, lr) })
}

func (o *SGD) buildIndex() { buildIndex(o.Params, &o.index) }

func (o *SGD) step(p *ferry.Tensor, lr float32) error {
	if o.Nesterov && (o.Momentum <= 0 || o.Dampening != 0) {
		return fmt.Errorf("optim.SGD: Nesterov momentum needs Momentum > 0 and Dampening 0")
	}
	g := p.Grad()
	if g == nil {
		return nil
	}
	if err := checkParam(p); err != nil {
		return err
	}
	if o.host != nil {
		return o.hostStep(p, g, lr)
	}
	if err := checkOnDevice(p); err != nil {
		return err
	}
	return ferry.Catch(func() error {
		hp := device.SGDParams{LR: lr, Momentum: o.Momentum, Dampening: o.Dampening, WeightDecay: o.WeightDecay, Nesterov: o.Nesterov}
		var mv device.View
		if o.Momentum != 0 {
			b, ok := o.buf[p]
			if !ok {
				b = stateLike(p)
				o.buf[p] = b
				hp.First = true
			}
			mv = b.View()
		}
		if p.Numel() == 0 { // no elements (and, on the CPU, no block): nothing to update
			return nil
		}
		if err := p.Device().Kernels().SGDStep(p.View(), g.View(), mv, hp); err != nil {
			return err
		}
		ferry.BumpVersion(p, "sgd_step")
		return pageOut(p)
	})
}

// ZeroGrad drops the gradients.
func (o *SGD) ZeroGrad() { zeroGrad(o.Params) }

// LR is the learning rate.
func (o *SGD) LR() float64 { return float64(o.lr) }

// SetLR sets the learning rate of the next steps.
func (o *SGD) SetLR(lr float64) { o.lr = float32(lr) }

// Release frees the momentum buffers. Releasing again does nothing.
func (o *SGD) Release() {
	if o.host != nil {
		o.host.release()
	}
	for p, b := range o.buf {
		b.Release()
		delete(o.buf, p)
	}
}

// AdamW is Adam with decoupled weight decay (PyTorch: torch.optim.AdamW,
// whose defaults NewAdamW uses: betas 0.9, 0.999, eps 1e-8, weight decay
// 0.01).
type AdamW struct {
	Params                         []*ferry.Tensor
	lr                             float32
	Beta1, Beta2, Eps, WeightDecay float32
	state                          map[*ferry.Tensor]*adamState
	index                          map[*ferry.Tensor]bool
	host                           *hostStore // the state, with OnHost; nil otherwise
}

type adamState struct {
	step          int
	expAvg, expSq *ferry.Tensor
}

// NewAdamW returns AdamW with PyTorch's defaults and learning rate lr.
// OnHost keeps the moments on the host.
func NewAdamW(params []*ferry.Tensor, lr float32, opts ...Option) *AdamW {
	params = unique(params)
	o := &AdamW{Params: params, lr: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01,
		state: map[*ferry.Tensor]*adamState{}}
	if buildOptions(opts).host {
		o.host = newHostStore()
	}
	return o
}

// Step applies one update: a kernel per parameter, or, on a device with
// device.MultiTensorOptimKernels (CUDA), one launch for many parameters,
// with the same bits; with the state on the host (OnHost), one host step
// per parameter.
func (o *AdamW) Step() error {
	lr := o.lr
	if o.host != nil {
		return stepAll(o.Params, func(p *ferry.Tensor) error { return o.step(p, lr) })
	}
	b := &adamBatch{o: o}
	for _, p := range o.Params {
		if p.Grad() == nil {
			continue
		}
		mk, ok := p.Device().Kernels().(device.MultiTensorOptimKernels)
		if !ok {
			if err := b.flush(); err != nil {
				return err
			}
			if err := o.step(p, lr); err != nil {
				return err
			}
			continue
		}
		if err := b.add(p, mk); err != nil {
			if ferr := b.flush(); ferr != nil {
				return ferr
			}
			return err
		}
	}
	return b.flush()
}

// adamBatch collects parameters of one device and one step count for one
// AdamWSteps call, in Params order.
type adamBatch struct {
	o      *AdamW
	mk     device.MultiTensorOptimKernels
	dev    device.Device
	step   int
	ts     []device.AdamWTensors
	params []*ferry.Tensor
}

// add checks p, makes its state, counts its step and adds it, first
// flushing the batch if p cannot join it (another device or step count,
// or memory that overlaps a parameter already in it).
func (b *adamBatch) add(p *ferry.Tensor, mk device.MultiTensorOptimKernels) error {
	if err := checkParam(p); err != nil {
		return err
	}
	if err := checkOnDevice(p); err != nil {
		return err
	}
	return ferry.Catch(func() error {
		s, ok := b.o.state[p]
		if !ok {
			s = &adamState{expAvg: stateLike(p), expSq: stateLike(p)}
			b.o.state[p] = s
		}
		t := device.AdamWTensors{Param: p.View(), Grad: p.Grad().View(), ExpAvg: s.expAvg.View(), ExpAvgSq: s.expSq.View()}
		join := len(b.ts) == 0 || b.dev == p.Device() && b.step == s.step+1
		for _, u := range b.ts {
			if !join {
				break
			}
			join = !overlaps(u.Param, t.Param)
		}
		if !join {
			if err := b.flush(); err != nil {
				return err
			}
		}
		s.step++
		b.mk, b.dev, b.step = mk, p.Device(), s.step
		b.ts = append(b.ts, t)
		b.params = append(b.params, p)
		return nil
	})
}

// flush updates the batch's parameters and empties it.
func (b *adamBatch) flush() error {
	if len(b.ts) == 0 {
		return nil
	}
	o := b.o
	hp := device.AdamWParams{LR: o.lr, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, Step: b.step}
	err := b.mk.AdamWSteps(b.ts, hp)
	if err == nil {
		err = ferry.Catch(func() error {
			for _, p := range b.params {
				ferry.BumpVersion(p, "adamw_step")
			}
			return nil
		})
	}
	clear(b.ts)
	clear(b.params)
	b.ts, b.params = b.ts[:0], b.params[:0]
	return err
}

// overlaps reports whether two contiguous views share memory.
func overlaps(a, b device.View) bool {
	if a.Block != b.Block {
		return false
	}
	return a.Off < b.Off+b.Numel() && b.Off < a.Off+a.Numel()
}

// StepParam updates one parameter (see Stepper).
func (o *AdamW) StepParam(p *ferry.Tensor) error { return o.stepParamLR(p, o.lr) }

func (o *AdamW) stepParamLR(p *ferry.Tensor, lr float32) error {
	return stepOne(o.Params, &o.index, p, func(p *ferry.Tensor) error { return o.step(p, lr) })
}

func (o *AdamW) buildIndex() { buildIndex(o.Params, &o.index) }

func (o *AdamW) step(p *ferry.Tensor, lr float32) error {
	g := p.Grad()
	if g == nil {
		return nil
	}
	if err := checkParam(p); err != nil {
		return err
	}
	if o.host != nil {
		return o.hostStep(p, g, lr)
	}
	if err := checkOnDevice(p); err != nil {
		return err
	}
	return ferry.Catch(func() error {
		s, ok := o.state[p]
		if !ok {
			s = &adamState{expAvg: stateLike(p), expSq: stateLike(p)}
			o.state[p] = s
		}
		s.step++
		hp := device.AdamWParams{LR: lr, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, Step: s.step}
		if p.Numel() == 0 { // no elements (and, on the CPU, no block): nothing to update
			return nil
		}
		if err := p.Device().Kernels().AdamWStep(p.View(), g.View(), s.expAvg.View(), s.expSq.View(), hp); err != nil {
			return err
		}
		ferry.BumpVersion(p, "adamw_step")
		return pageOut(p)
	})
}

// ZeroGrad drops the gradients.
func (o *AdamW) ZeroGrad() { zeroGrad(o.Params) }

// LR is the learning rate.
func (o *AdamW) LR() float64 { return float64(o.lr) }

// SetLR sets the learning rate of the next steps.
func (o *AdamW) SetLR(lr float64) { o.lr = float32(lr) }

// Release frees the moments. Releasing again does nothing.
func (o *AdamW) Release() {
	if o.host != nil {
		o.host.release()
	}
	for p, s := range o.state {
		s.expAvg.Release()
		s.expSq.Release()
		delete(o.state, p)
	}
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
// SGD and AdamW the result equals Backward followed by Step and ZeroGrad.
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
	return ferry.BackwardOptions{GradReady: func(p *ferry.Tensor) {
		if e.Err() != nil {
			return
		}
		if err := step(p); err != nil {
			e.set(err)
			return
		}
		p.SetGrad(nil)
	}}, e
}

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
