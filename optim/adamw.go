package optim

import (
	"math"

	"ferry"
	"ferry/device"
	"ferry/internal/optkernel"
)

// AdamW is Adam with decoupled weight decay (PyTorch: torch.optim.AdamW,
// whose defaults NewAdamW uses: betas 0.9, 0.999, eps 1e-8, weight decay
// 0.01). Its state is two float32 moments a parameter ("exp_avg",
// "exp_avg_sq", 8 bytes an element) and the step count.
type AdamW struct {
	Engine
	Beta1, Beta2, Eps, WeightDecay float32
}

// NewAdamW returns AdamW with PyTorch's defaults and learning rate lr.
// OnHost keeps the moments on the host.
func NewAdamW(params []*ferry.Tensor, lr float32, opts ...Option) *AdamW {
	o := &AdamW{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	o.Init(o, params, lr, opts...)
	return o
}

// adamDefaults are torch.optim.AdamW's; adamRecipe nanoGPT's.
var (
	adamDefaults = map[string]float64{"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}
	adamRecipe   = map[string]float64{"beta2": 0.95, "weight_decay": 0.1}
)

// checkAdam refuses betas outside [0, 1), a negative eps or weight decay.
func checkAdam(name string, h map[string]float64) error {
	if err := checkLR(name, h["lr"]); err != nil {
		return err
	}
	for _, k := range []string{"beta1", "beta2"} {
		if err := checkRange(name, k, h[k], 0, 1, true); err != nil {
			return err
		}
	}
	if err := checkRange(name, "eps", h["eps"], 0, 1, false); err != nil {
		return err
	}
	return checkRange(name, "weight_decay", h["weight_decay"], 0, 1e6, false)
}

func init() {
	Register(Registration{
		Name:     "adamw",
		Summary:  "Adam with decoupled weight decay (torch.optim.AdamW); two float32 moments, 8 bytes a parameter",
		Defaults: adamDefaults,
		Recipe:   adamRecipe,
		New: func(params []*ferry.Tensor, h map[string]float64, opts ...Option) (Optimizer, error) {
			if err := checkAdam("adamw", h); err != nil {
				return nil, err
			}
			o := NewAdamW(params, float32(h["lr"]), opts...)
			o.Beta1, o.Beta2, o.Eps, o.WeightDecay = float32(h["beta1"]), float32(h["beta2"]), float32(h["eps"]), float32(h["weight_decay"])
			return o, nil
		},
	})
}

// Name is "adamw".
func (o *AdamW) Name() string { return "adamw" }

// Hyper lists beta1, beta2, eps and weight_decay.
func (o *AdamW) Hyper() map[string]any {
	return map[string]any{"beta1": o.Beta1, "beta2": o.Beta2, "eps": o.Eps, "weight_decay": o.WeightDecay}
}

// Layout is the two moments and the step.
func (o *AdamW) Layout(shape []int) Layout { return adamLayout(shape) }

func adamLayout(shape []int) Layout {
	return Layout{Slots: []Slot{{Name: "exp_avg", DType: device.Float32, Shape: shape}, {Name: "exp_avg_sq", DType: device.Float32, Shape: shape}},
		Step: true, Traffic: 28 * int64(device.Numel(shape))} // reads w, g, m, v; writes w, m, v
}

func (o *AdamW) params(lr float32, step int) device.AdamWParams {
	return device.AdamWParams{LR: lr, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, Step: step}
}

// Update runs package optkernel's loops: the CPU device's bits.
func (o *AdamW) Update(u *Update, lo, hi int) {
	optkernel.AdamWSerial(u.W[lo:hi], u.G[lo:hi], Float32s(u.State[0])[lo:hi], Float32s(u.State[1])[lo:hi], o.params(u.LR, u.Step))
}

// StepKernel runs the device's AdamWStep (device.OptimizerKernels).
func (o *AdamW) StepKernel(k device.Kernels, p, g *ferry.Tensor, state []*ferry.Tensor, u KernelUpdate) (bool, error) {
	ok, has := k.(device.OptimizerKernels)
	if !has {
		return false, nil
	}
	return true, ok.AdamWStep(p.View(), g.View(), state[0].View(), state[1].View(), o.params(u.LR, u.Step))
}

// StepTensors is torch.optim.AdamW's single-tensor step (PyTorch 1.13)
// in tensor ops, in Update's order.
func (o *AdamW) StepTensors(p, g *ferry.Tensor, state []*ferry.Tensor, u KernelUpdate) {
	m, v := state[0], state[1]
	bc1 := 1 - math.Pow(float64(o.Beta1), float64(u.Step))
	bc2 := 1 - math.Pow(float64(o.Beta2), float64(u.Step))
	p.ScaleInPlace(1 - u.LR*o.WeightDecay)
	m.ScaleInPlace(o.Beta1) // m = m·β1 + g·(1-β1)
	t := ferry.Scale(g, 1-o.Beta1)
	m.AddInPlace(t)
	t.Release()
	v.ScaleInPlace(o.Beta2) // v = v·β2 + ((1-β2)·g)·g
	t = ferry.Scale(g, 1-o.Beta2)
	t.MulInPlace(g)
	v.AddInPlace(t)
	t.Release()
	denom := ferry.Sqrt(v) // √v / √bc2 + eps
	c := ferry.Full(p.Device(), float32(math.Sqrt(bc2)), 1)
	d := ferry.Div(denom, c)
	denom.Release()
	c.Release()
	denom = ferry.AddScalar(d, o.Eps)
	d.Release()
	t = ferry.Scale(m, -float32(float64(u.LR)/bc1)) // w += (-step_size·m) / denom
	q := ferry.Div(t, denom)
	t.Release()
	denom.Release()
	p.AddInPlace(q)
	q.Release()
}

// stepBatched is Step where the device updates many parameters in one
// launch (device.MultiTensorOptimKernels, CUDA): the parameters of one
// device and one step count are batched, in Params order; the others
// step alone. The bits are AdamWStep's.
func (o *AdamW) stepBatched(e *Engine, lr float32) error {
	b := &adamBatch{o: o, e: e, lr: lr}
	for _, p := range e.params {
		if p.Grad() == nil {
			continue
		}
		mk, ok := p.Device().Kernels().(device.MultiTensorOptimKernels)
		if !ok {
			if err := b.flush(); err != nil {
				return err
			}
			if err := e.step(p, lr); err != nil {
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
	e      *Engine
	lr     float32
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
		s, _ := b.e.deviceState(p)
		t := device.AdamWTensors{Param: p.View(), Grad: p.Grad().View(), ExpAvg: s.tensors[0].View(), ExpAvgSq: s.tensors[1].View()}
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
	err := b.mk.AdamWSteps(b.ts, b.o.params(b.lr, b.step))
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
