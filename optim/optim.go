// Package optim updates parameters from their gradients: SGD and AdamW
// with PyTorch's update rules, each step one fused kernel per parameter.
//
// Optimizer state (momentum, Adam's moments) is allocated on the
// parameter's device on the first step, counted as optimizer state in the
// allocator's statistics, and kept until Release.
package optim

import (
	"fmt"

	"ferry"
	"ferry/device"
)

// Optimizer is what SGD and AdamW have in common.
type Optimizer interface {
	// Step updates every parameter that has a gradient.
	Step() error
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

// stateLike allocates a zeroed tensor shaped like p, as optimizer state.
func stateLike(p *ferry.Tensor) *ferry.Tensor {
	return ferry.Zeros(p.Device(), p.Shape()...).SetCategory(device.OptimizerState)
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

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and (L2) weight decay (PyTorch: torch.optim.SGD).
type SGD struct {
	Params                               []*ferry.Tensor
	LR, Momentum, Dampening, WeightDecay float32
	Nesterov                             bool
	buf                                  map[*ferry.Tensor]*ferry.Tensor
}

// NewSGD returns plain SGD with learning rate lr; set the other fields for
// momentum and weight decay.
func NewSGD(params []*ferry.Tensor, lr float32) *SGD {
	return &SGD{Params: params, LR: lr, buf: map[*ferry.Tensor]*ferry.Tensor{}}
}

// Step applies one update.
func (o *SGD) Step() error {
	if o.Nesterov && (o.Momentum <= 0 || o.Dampening != 0) {
		return fmt.Errorf("optim.SGD: Nesterov momentum needs Momentum > 0 and Dampening 0")
	}
	return ferry.Catch(func() error {
		for _, p := range o.Params {
			g := p.Grad()
			if g == nil {
				continue
			}
			if err := checkParam(p); err != nil {
				return err
			}
			hp := device.SGDParams{LR: o.LR, Momentum: o.Momentum, Dampening: o.Dampening, WeightDecay: o.WeightDecay, Nesterov: o.Nesterov}
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
			if err := p.Device().Kernels().SGDStep(p.View(), g.View(), mv, hp); err != nil {
				return err
			}
			ferry.BumpVersion(p, "sgd_step")
		}
		return nil
	})
}

// ZeroGrad drops the gradients.
func (o *SGD) ZeroGrad() { zeroGrad(o.Params) }

// Release frees the momentum buffers.
func (o *SGD) Release() {
	for p, b := range o.buf {
		b.Release()
		delete(o.buf, p)
	}
}

// AdamW is Adam with decoupled weight decay (PyTorch: torch.optim.AdamW,
// whose defaults NewAdamW uses: betas 0.9, 0.999, eps 1e-8, weight decay
// 0.01).
type AdamW struct {
	Params                             []*ferry.Tensor
	LR, Beta1, Beta2, Eps, WeightDecay float32
	state                              map[*ferry.Tensor]*adamState
}

type adamState struct {
	step          int
	expAvg, expSq *ferry.Tensor
}

// NewAdamW returns AdamW with PyTorch's defaults and learning rate lr.
func NewAdamW(params []*ferry.Tensor, lr float32) *AdamW {
	return &AdamW{Params: params, LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01,
		state: map[*ferry.Tensor]*adamState{}}
}

// Step applies one update.
func (o *AdamW) Step() error {
	return ferry.Catch(func() error {
		for _, p := range o.Params {
			g := p.Grad()
			if g == nil {
				continue
			}
			if err := checkParam(p); err != nil {
				return err
			}
			s, ok := o.state[p]
			if !ok {
				s = &adamState{expAvg: stateLike(p), expSq: stateLike(p)}
				o.state[p] = s
			}
			s.step++
			hp := device.AdamWParams{LR: o.LR, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, Step: s.step}
			if err := p.Device().Kernels().AdamWStep(p.View(), g.View(), s.expAvg.View(), s.expSq.View(), hp); err != nil {
				return err
			}
			ferry.BumpVersion(p, "adamw_step")
		}
		return nil
	})
}

// ZeroGrad drops the gradients.
func (o *AdamW) ZeroGrad() { zeroGrad(o.Params) }

// Release frees the moments.
func (o *AdamW) Release() {
	for p, s := range o.state {
		s.expAvg.Release()
		s.expSq.Release()
		delete(o.state, p)
	}
}
