// Package nn holds ferry's layers: modules with named parameters that
// compose into models, in the shape of PyTorch's torch.nn.
//
// A module's Forward takes a tensor the caller owns and returns a new one
// the caller owns; whatever the module makes in between it releases itself
// (or leaves to autograd, which keeps what backward needs). So a model built
// from these modules holds, after forward, exactly what PyTorch would.
//
// The layers are generic: Linear, the activations ReLU, GELU, Tanh and
// Sigmoid, LayerNorm and RMSNorm, Embedding, Dropout, and the containers
// Sequential, ModuleList and Checkpoint. Two whole models are built from
// them: GPT (nanoGPT's GPT-2, with its own attention, MLP and block) and
// Llama (Hugging Face's LlamaForCausalLM). Parameters are named as
// PyTorch names them; modules save and load safetensors files, and the
// models load Hugging Face's checkpoints.
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
	// Parameters lists the module's parameters, each once. Their names
	// in the module ("0.weight") come from NamedParameters.
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

// normal draws a parameter-category tensor from N(0, std²).
func normal(dev device.Device, rng *rand.Rand, std float32, shape ...int) *ferry.Tensor {
	t := ferry.RandnAs(dev, device.Parameter, rng, shape...)
	if std != 1 {
		t.ScaleInPlace(std)
	}
	return t
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

// ForwardFused runs the Linear and next as one op when next is an
// elementwise function (Epiloguer) that the op layer fuses into a linear
// op (ferry.LinearEpilogue): a ReLU, as ferry.LinearReLU, or a tanh GELU,
// as ferry.LinearGELUTanh. See Fuser.
func (l *Linear) ForwardFused(x *ferry.Tensor, next Module, nextScope string) (*ferry.Tensor, bool) {
	e, ok := next.(Epiloguer)
	if !ok || e.Epilogue() == ferry.EpilogueNone {
		return nil, false
	}
	return ferry.LinearEpilogue(x, l.Weight, l.Bias, e.Epilogue(), nextScope)
}

// Parameters returns the weight and, if any, the bias.
func (l *Linear) Parameters() []*ferry.Tensor {
	if l.Bias == nil {
		return []*ferry.Tensor{l.Weight}
	}
	return []*ferry.Tensor{l.Weight, l.Bias}
}

// NamedParameters names them "weight" and "bias".
func (l *Linear) NamedParameters() []Named { return weightBias(l.Weight, l.Bias) }

// weightBias names a weight and an optional bias.
func weightBias(w, b *ferry.Tensor) []Named {
	var ns []Named
	if w != nil {
		ns = append(ns, Named{Name: "weight", Tensor: w})
	}
	if b != nil {
		ns = append(ns, Named{Name: "bias", Tensor: b})
	}
	return ns
}

func nonNil(ts ...*ferry.Tensor) []*ferry.Tensor {
	var out []*ferry.Tensor
	for _, t := range ts {
		if t != nil {
			out = append(out, t)
		}
	}
	return out
}

// Epiloguer is an optional interface of a Module that is an elementwise
// function an op before it can apply in its own pass over memory
// (ferry.Epilogue); a Linear before it in a Sequential asks the op layer
// for the fused pair (ferry.LinearEpilogue).
type Epiloguer interface {
	Epilogue() ferry.Epilogue
}

// Fuser is an optional interface of a Module that can run together with
// the module after it in a container as one op, in fewer passes over
// memory. ForwardFused returns next.Forward(m.Forward(x)) and true, or
// false having done nothing when it cannot fuse with next. Fused, it must
// compute what the two modules compute, record the same ops, save the
// same tensors and allocate the same memory, next's ops in module scope
// nextScope, a sibling of the innermost scope (as ferry.LinearEpilogue
// records it), so that a container need not know which modules fuse.
type Fuser interface {
	ForwardFused(x *ferry.Tensor, next Module, nextScope string) (*ferry.Tensor, bool)
}

// Sequential runs modules one after another (PyTorch: nn.Sequential).
// Each intermediate output is released as soon as the next module has used
// it; autograd keeps what backward needs.
type Sequential struct {
	Modules []Module
}

// NewSequential chains modules. A parameter's name in the result is its
// module's position and its name there ("0.weight", "2.bias"; nested:
// "0.2.weight"), computed by NamedParameters without renaming the
// modules; see Note [parameter labels] for the names written into the
// tensors.
func NewSequential(modules ...Module) *Sequential {
	s := &Sequential{Modules: modules}
	label(s)
	return s
}

// Forward runs each module on the previous one's output. On a tape, each
// module runs in a module scope named by its index, so that saved tensors
// know which layer saved them. A module that implements Fuser may run
// together with the module after it, as one op (a Linear and the ReLU
// after it run as ferry.LinearReLU).
func (s *Sequential) Forward(x *ferry.Tensor) *ferry.Tensor {
	h := x
	tp := x.Tape()
	for i := 0; i < len(s.Modules); i++ {
		m := s.Modules[i]
		if tp != nil {
			tp.PushModule(moduleName(i))
		}
		var next *ferry.Tensor
		fused := false
		if f, ok := m.(Fuser); ok && i+1 < len(s.Modules) {
			next, fused = f.ForwardFused(h, s.Modules[i+1], moduleName(i+1))
		}
		if fused {
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

// moduleName is strconv.Itoa, which makes no garbage for indices under 100.
func moduleName(i int) string { return strconv.Itoa(i) }

// Parameters returns every module's parameters, in order, each once (a
// module used twice shares its parameters).
func (s *Sequential) Parameters() []*ferry.Tensor { return tensors(s.NamedParameters()) }

// NamedParameters names each module's parameters by its index.
func (s *Sequential) NamedParameters() []Named { return ModuleList(s.Modules).NamedParameters() }

// SetTraining sets every module that has a training mode (Trainable).
func (s *Sequential) SetTraining(on bool) { ModuleList(s.Modules).SetTraining(on) }

// SetStep sets the step of every module that has one (Stepped).
func (s *Sequential) SetStep(step uint64) { ModuleList(s.Modules).SetStep(step) }

// SetFirstRow passes the first global batch row to every module that
// takes it (Sharded).
func (s *Sequential) SetFirstRow(row uint64) { ModuleList(s.Modules).SetFirstRow(row) }

// ModuleList holds modules that the caller runs itself (PyTorch:
// nn.ModuleList); it gives them names and collects their parameters.
type ModuleList []Module

// NewModuleList names the modules' parameters by position, as
// NewSequential does.
func NewModuleList(modules ...Module) ModuleList {
	l := ModuleList(modules)
	label(l)
	return l
}

// Parameters returns every module's parameters, in order, each once.
func (l ModuleList) Parameters() []*ferry.Tensor { return tensors(l.NamedParameters()) }

// NamedParameters names each module's parameters by its index.
func (l ModuleList) NamedParameters() []Named {
	var ns []Named
	for i, m := range l {
		ns = append(ns, Prefixed(moduleName(i), m)...)
	}
	return uniqueNamed(ns)
}

// SetTraining sets every module that has a training mode (Trainable).
func (l ModuleList) SetTraining(on bool) {
	for _, m := range l {
		SetTraining(m, on)
	}
}

// SetStep sets the step of every module that has one (Stepped).
func (l ModuleList) SetStep(step uint64) {
	for _, m := range l {
		SetStep(m, step)
	}
}

// SetFirstRow passes the first global batch row to every module that
// takes it (Sharded).
func (l ModuleList) SetFirstRow(row uint64) {
	for _, m := range l {
		SetFirstRow(m, row)
	}
}

// MSELoss is ferry.MSELoss, here for PyTorch users' muscle memory.
func MSELoss(x, target *ferry.Tensor) *ferry.Tensor { return ferry.MSELoss(x, target) }
