// Package nn holds ferry's layers: modules with named parameters that
// compose into models, in the shape of PyTorch's torch.nn.
//
// A module's Forward takes a tensor the caller owns and returns a new one
// the caller owns; whatever the module makes in between it releases itself
// (or leaves to autograd, which keeps what backward needs). So a model built
// from these modules holds, after forward, exactly what PyTorch would.
package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"ferry"
	"ferry/device"
)

// Module is a layer or a model.
type Module interface {
	// Forward computes the module's output for x. x stays the caller's;
	// the result is a new tensor the caller owns.
	Forward(x *ferry.Tensor) *ferry.Tensor
	// Parameters lists the module's parameters, named by their path in
	// the module ("0.weight"; see ferry.Tensor.Name).
	Parameters() []*ferry.Tensor
}

// Release frees every parameter of m (and their gradients). m must not be
// used afterwards.
func Release(m Module) {
	for _, p := range m.Parameters() {
		p.Release()
	}
}

// ParameterBytes is the memory m's parameters take.
func ParameterBytes(m Module) int64 {
	var n int64
	for _, p := range m.Parameters() {
		n += p.Bytes()
	}
	return n
}

// NewParameter turns t into a parameter: a leaf that requires grad, counted
// as parameter memory, named name.
func NewParameter(t *ferry.Tensor, name string) *ferry.Tensor {
	return t.SetCategory(device.Parameter).RequireGrad().SetName(name)
}

// Linear is y = x·Wᵀ + b (PyTorch: nn.Linear).
type Linear struct {
	Weight *ferry.Tensor // [out, in]
	Bias   *ferry.Tensor // [out], or nil
}

// NewLinear makes a Linear layer on dev, initialised as PyTorch does
// (weight and bias uniform in ±1/√in, which is kaiming_uniform_ with a=√5),
// drawing from rng so that a seed gives the same layer every time.
func NewLinear(dev device.Device, in, out int, bias bool, rng *rand.Rand) (l *Linear, err error) {
	if in <= 0 || out <= 0 {
		return nil, fmt.Errorf("nn.NewLinear: sizes must be positive, got in=%d out=%d", in, out)
	}
	err = ferry.Catch(func() error {
		bound := float32(1 / math.Sqrt(float64(in)))
		l = &Linear{Weight: NewParameter(ferry.UniformAs(dev, device.Parameter, rng, -bound, bound, out, in), "weight")}
		if bias {
			l.Bias = NewParameter(ferry.UniformAs(dev, device.Parameter, rng, -bound, bound, out), "bias")
		}
		return nil
	})
	if err != nil {
		if l != nil {
			l.Weight.Release()
		}
		return nil, err
	}
	return l, nil
}

// Forward returns x·Wᵀ + b.
func (l *Linear) Forward(x *ferry.Tensor) *ferry.Tensor { return ferry.Linear(x, l.Weight, l.Bias) }

// Parameters returns the weight and, if any, the bias.
func (l *Linear) Parameters() []*ferry.Tensor {
	if l.Bias == nil {
		return []*ferry.Tensor{l.Weight}
	}
	return []*ferry.Tensor{l.Weight, l.Bias}
}

// ReLU is max(x, 0) as a module.
type ReLU struct{}

func (ReLU) Forward(x *ferry.Tensor) *ferry.Tensor { return ferry.ReLU(x) }
func (ReLU) Parameters() []*ferry.Tensor           { return nil }

// GELU is the Gaussian error linear unit as a module; Tanh selects the tanh
// approximation (PyTorch: approximate="tanh").
type GELU struct{ Tanh bool }

func (g GELU) Forward(x *ferry.Tensor) *ferry.Tensor {
	if g.Tanh {
		return ferry.GELUTanh(x)
	}
	return ferry.GELU(x)
}
func (GELU) Parameters() []*ferry.Tensor { return nil }

// Sequential runs modules one after another (PyTorch: nn.Sequential).
// Each intermediate output is released as soon as the next module has used
// it; autograd keeps what backward needs.
type Sequential struct {
	Modules []Module
}

// NewSequential chains modules, naming their parameters by position
// ("0.weight", "1.bias").
func NewSequential(modules ...Module) *Sequential {
	named := map[*ferry.Tensor]bool{}
	for i, m := range modules {
		for _, p := range m.Parameters() {
			if !named[p] { // a module used twice keeps its first name
				named[p] = true
				p.SetName(fmt.Sprintf("%d.%s", i, p.Name()))
			}
		}
	}
	return &Sequential{Modules: modules}
}

// Forward runs each module on the previous one's output. On a tape, each
// module runs in a module scope named by its index, so that saved tensors
// know which layer saved them. A Linear followed by a ReLU runs as
// ferry.LinearReLU, which computes the same, records the same ops and
// allocates the same memory, in fewer passes over it.
func (s *Sequential) Forward(x *ferry.Tensor) *ferry.Tensor {
	h := x
	tp := x.Tape()
	for i := 0; i < len(s.Modules); i++ {
		m := s.Modules[i]
		if tp != nil {
			tp.PushModule(moduleName(i))
		}
		var next *ferry.Tensor
		if l, ok := m.(*Linear); ok && i+1 < len(s.Modules) && isReLU(s.Modules[i+1]) {
			next = ferry.LinearReLUAs(h, l.Weight, l.Bias, moduleName(i+1))
			i++
		} else {
			next = m.Forward(h)
		}
		if tp != nil {
			tp.PopModule()
		}
		if h != x && next != h {
			h.Release()
		}
		h = next
	}
	if h == x { // no modules, or all passed x through: still a new handle
		return x.Contiguous()
	}
	return h
}

func isReLU(m Module) bool {
	switch m.(type) {
	case ReLU, *ReLU:
		return true
	}
	return false
}

// moduleName is strconv.Itoa, which makes no garbage for indices under 100.
func moduleName(i int) string { return strconv.Itoa(i) }

// Parameters returns every module's parameters, in order, each once (a
// module used twice shares its parameters).
func (s *Sequential) Parameters() []*ferry.Tensor {
	var ps []*ferry.Tensor
	for _, m := range s.Modules {
		ps = append(ps, m.Parameters()...)
	}
	return uniqueParams(ps)
}

func uniqueParams(ps []*ferry.Tensor) []*ferry.Tensor {
	seen := map[*ferry.Tensor]bool{}
	out := ps[:0:0]
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// ModuleList holds modules that the caller runs itself (PyTorch:
// nn.ModuleList); it gives them names and collects their parameters.
type ModuleList []Module

// NewModuleList names the modules' parameters by position.
func NewModuleList(modules ...Module) ModuleList {
	NewSequential(modules...) // same naming
	return ModuleList(modules)
}

// Parameters returns every module's parameters, in order, each once.
func (l ModuleList) Parameters() []*ferry.Tensor {
	var ps []*ferry.Tensor
	for _, m := range l {
		ps = append(ps, m.Parameters()...)
	}
	return uniqueParams(ps)
}

// MSELoss is ferry.MSELoss, here for PyTorch users' muscle memory.
func MSELoss(x, target *ferry.Tensor) *ferry.Tensor { return ferry.MSELoss(x, target) }

// CrossEntropyLoss is ferry.CrossEntropy.
func CrossEntropyLoss(logits, target *ferry.Tensor) *ferry.Tensor {
	return ferry.CrossEntropy(logits, target)
}
