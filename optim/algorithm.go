package optim

import (
	"unsafe"

	"ferry"
	"ferry/device"
)

// An Algorithm is one optimizer's mathematics, for one parameter at a
// time: the hyperparameters that decide it, the state it keeps and its
// update. Everything around it — when state is made, where it lives
// (device or host), how it is saved, restored and sharded, how the update
// reaches the device (Note [update paths]) — is Engine's, so an optimizer
// is one file: a type that embeds Engine and implements Algorithm, and a
// Register call (lion.go is the example).
type Algorithm interface {
	// Name is the name the optimizer is registered under ("adamw").
	Name() string
	// Hyper lists the hyperparameters other than the learning rate, as
	// the optimizer holds them (float32 or bool): with Name, what decides
	// its mathematics, and so a training run's identity.
	Hyper() map[string]any
	// Layout is the state kept for a parameter of the given shape.
	Layout(shape []int) Layout
	// Update runs one update of the elements [lo, hi) of u's parameter
	// (lo a multiple of Layout's Grain), on host memory. It may run on
	// several goroutines at once, on disjoint ranges.
	Update(u *Update, lo, hi int)
}

// Layout is the state an Algorithm keeps for one parameter.
type Layout struct {
	// Slots are the state tensors, made zero at the parameter's first
	// update (lazily, so that a ZeRO rank makes only its shard's).
	Slots []Slot
	// Step: the update reads the number of updates so far, which is kept
	// and saved as the scalar "<parameter>.step" (AdamW's bias
	// correction). Without it nothing is saved beside the slots.
	Step bool
	// Grain is the fewest elements an Update's range may start at a
	// multiple of (a quantisation block); 0 or 1 for any.
	Grain int
	// Traffic is the bytes one update reads plus writes, parameter and
	// gradient included: what a device that prices work (meta) charges.
	Traffic int64
}

// Slot is one state tensor of a parameter: saved as "<parameter>.<Name>"
// (PyTorch's names where PyTorch has the optimizer: "exp_avg").
type Slot struct {
	Name  string // no dots
	DType device.DType
	Shape []int
}

// Bytes is the memory the layout's slots hold.
func (l Layout) Bytes() int64 {
	var n int64
	for _, s := range l.Slots {
		n += int64(device.Numel(s.Shape)) * int64(s.DType.Size())
	}
	return n
}

// Update is one parameter's update on host memory, as Algorithm.Update
// sees it. The slices cover the whole parameter; Update touches only its
// range.
type Update struct {
	W, G []float32 // the parameter's values and gradient
	// State is each slot's memory, in Layout order (Float32s views a
	// float32 slot).
	State [][]byte
	LR    float32
	// Step counts this update: 1 at the parameter's first.
	Step int
	// Fresh: the state was made for this update (it is zero).
	Fresh bool
}

// Float32s views b, the memory of a float32 slot (4-byte aligned, as
// every slot is), as float32s.
func Float32s(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// asBytes is the memory of f.
func asBytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), len(f)*4)
}

// KernelStepper is an Algorithm with a fused step on some devices: Step
// tries it first (Note [update paths]).
type KernelStepper interface {
	// StepKernel updates p from g with state (Layout's slots, on p's
	// device) through k, and reports false, doing nothing, when k has no
	// kernel for it.
	StepKernel(k device.Kernels, p, g *ferry.Tensor, state []*ferry.Tensor, u KernelUpdate) (bool, error)
}

// KernelUpdate is what StepKernel and StepTensors are told of an update
// besides the tensors (see Update).
type KernelUpdate struct {
	LR    float32
	Step  int
	Fresh bool
}

// TensorStepper is an Algorithm whose update is also written with tensor
// ops: the fallback on a device with neither a fused kernel nor memory Go
// addresses (Note [update paths]).
type TensorStepper interface {
	// StepTensors updates p from g with state by tensor ops, in place,
	// with the float32 operations of Update in its order, so with its
	// bits where the device rounds as Go does. It panics with a
	// *ferry.Error (Step catches it) as ops do.
	StepTensors(p, g *ferry.Tensor, state []*ferry.Tensor, u KernelUpdate)
}

// Note [update paths]. Engine updates a parameter whose state is on its
// device by the first of:
//
//  1. the algorithm's fused kernel (KernelStepper), where the device has
//     it: SGD's and AdamW's device.OptimizerKernels on the CPU, CUDA and
//     meta devices, and AdamW's multi-tensor launch on CUDA;
//  2. its Go Update, in place, where the device's memory is the host's
//     (device.HostLoopKernels: the CPU device; the meta device prices it
//     as one kernel moving Layout.Traffic bytes);
//  3. its tensor ops (TensorStepper), on any other device (CUDA without
//     the kernel);
//  4. its Go Update on a copy: the parameter, gradient and state
//     downloaded, updated on the host, uploaded back.
//
// With the state on the host (OnHost) it is always the Go Update, on the
// host's cores. Paths 1, 2 and 4 give the same bits on the CPU (the fused
// kernels run the Go loops, package internal/optkernel); path 3 gives them
// where the device rounds each float32 operation as Go does. So a new
// optimizer is its Go Update and runs everywhere; a tensor-op version
// and a kernel are for speed on accelerators.
