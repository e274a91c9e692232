package optim

import (
	"fmt"

	"ferry"
	"ferry/device"
	"ferry/internal/optkernel"
)

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and (L2) weight decay (PyTorch: torch.optim.SGD).
// Its state is the momentum buffer ("momentum_buffer"), kept only with
// momentum.
type SGD struct {
	Engine
	Momentum, Dampening, WeightDecay float32
	Nesterov                         bool
}

// NewSGD returns plain SGD with learning rate lr; set the other fields for
// momentum and weight decay. OnHost keeps the momentum on the host.
func NewSGD(params []*ferry.Tensor, lr float32, opts ...Option) *SGD {
	o := &SGD{}
	o.Init(o, params, lr, opts...)
	return o
}

func init() {
	Register(Registration{
		Name:     "sgd",
		Summary:  "SGD with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD); 4 bytes a parameter with momentum",
		Defaults: map[string]float64{"lr": 1e-3, "momentum": 0, "dampening": 0, "weight_decay": 0, "nesterov": 0},
		Recipe:   map[string]float64{"momentum": 0.9},
		New: func(params []*ferry.Tensor, h map[string]float64, opts ...Option) (Optimizer, error) {
			if err := checkLR("sgd", h["lr"]); err != nil {
				return nil, err
			}
			for _, c := range []struct {
				key    string
				lo, hi float64
				open   bool
			}{{"momentum", 0, 1, true}, {"dampening", 0, 1, false}, {"weight_decay", 0, 1e6, false}, {"nesterov", 0, 1, false}} {
				if err := checkRange("sgd", c.key, h[c.key], c.lo, c.hi, c.open); err != nil {
					return nil, err
				}
			}
			o := NewSGD(params, float32(h["lr"]), opts...)
			o.Momentum, o.Dampening, o.WeightDecay = float32(h["momentum"]), float32(h["dampening"]), float32(h["weight_decay"])
			o.Nesterov = h["nesterov"] != 0
			if err := o.check(); err != nil {
				return nil, err
			}
			return o, nil
		},
	})
}

// Name is "sgd".
func (o *SGD) Name() string { return "sgd" }

// Hyper lists momentum, dampening, weight_decay and nesterov.
func (o *SGD) Hyper() map[string]any {
	return map[string]any{"momentum": o.Momentum, "dampening": o.Dampening, "weight_decay": o.WeightDecay, "nesterov": o.Nesterov}
}

func (o *SGD) check() error {
	if o.Nesterov && (o.Momentum <= 0 || o.Dampening != 0) {
		return fmt.Errorf("optim.SGD: Nesterov momentum needs Momentum > 0 and Dampening 0")
	}
	return nil
}

// Layout is the momentum buffer, with momentum; nothing without.
func (o *SGD) Layout(shape []int) Layout {
	n := int64(device.Numel(shape))
	if o.Momentum == 0 {
		return Layout{Traffic: 12 * n} // reads w, g; writes w
	}
	return Layout{Slots: []Slot{{Name: "momentum_buffer", DType: device.Float32, Shape: shape}},
		Traffic: 20 * n} // reads w, g, buf; writes w, buf
}

func (o *SGD) params(first bool) device.SGDParams {
	return device.SGDParams{LR: 0, Momentum: o.Momentum, Dampening: o.Dampening, WeightDecay: o.WeightDecay, Nesterov: o.Nesterov, First: first}
}

// Update runs package optkernel's loops: the CPU device's bits.
func (o *SGD) Update(u *Update, lo, hi int) {
	p := o.params(u.Fresh)
	p.LR = u.LR
	var buf []float32
	if o.Momentum != 0 {
		buf = Float32s(u.State[0])[lo:hi]
	}
	optkernel.SGDSerial(u.W[lo:hi], u.G[lo:hi], buf, p)
}

// StepKernel runs the device's SGDStep (device.OptimizerKernels).
func (o *SGD) StepKernel(k device.Kernels, p, g *ferry.Tensor, state []*ferry.Tensor, u KernelUpdate) (bool, error) {
	ok, has := k.(device.OptimizerKernels)
	if !has {
		return false, nil
	}
	hp := o.params(u.Fresh)
	hp.LR = u.LR
	var mv device.View
	if len(state) > 0 {
		mv = state[0].View()
	}
	return true, ok.SGDStep(p.View(), g.View(), mv, hp)
}

// StepTensors is torch.optim.SGD's single-tensor step in tensor ops, in
// Update's order.
func (o *SGD) StepTensors(p, g *ferry.Tensor, state []*ferry.Tensor, u KernelUpdate) {
	d := ferry.Scale(g, 1) // a copy the step may change
	defer d.Release()
	if o.WeightDecay != 0 { // d = g + wd·w
		t := ferry.Scale(p, o.WeightDecay)
		d.AddInPlace(t)
		t.Release()
	}
	if o.Momentum != 0 {
		buf := state[0]
		if u.Fresh {
			buf.CopyFrom(d)
		} else { // buf = buf·momentum + (1-dampening)·d
			buf.ScaleInPlace(o.Momentum)
			t := ferry.Scale(d, 1-o.Dampening)
			buf.AddInPlace(t)
			t.Release()
		}
		if o.Nesterov { // d += momentum·buf
			t := ferry.Scale(buf, o.Momentum)
			d.AddInPlace(t)
			t.Release()
		} else {
			d.CopyFrom(buf)
		}
	}
	d.ScaleInPlace(-u.LR)
	p.AddInPlace(d)
}
