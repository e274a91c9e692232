package ferry_test

import (
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
	"ferry/optim"
)

func newCPU(t testing.TB, opts device.Options) device.Device {
	t.Helper()
	dev, err := cpu.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// originModel builds L × (Linear(W, W) + ReLU) as nn.Sequential.
func originModel(t testing.TB, dev device.Device, layers, width int, seed uint64) *nn.Sequential {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0))
	var ms []nn.Module
	for i := 0; i < layers; i++ {
		l, err := nn.NewLinear(dev, width, width, true, rng)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, l, nn.ReLU{})
	}
	return nn.NewSequential(ms...)
}

// The yardstick of docs/design.md, decision 3: in Sequential{Linear, ReLU, ...}
// forward holds exactly the parameters, the input and one saved ReLU output
// per layer, and peaks one pre-activation higher.
func TestOriginForwardMemory(t *testing.T) {
	const L, W, B = 6, 64, 32
	dev := newCPU(t, device.Options{PoisonFreed: true})
	model := originModel(t, dev, L, W, 1)
	alloc := dev.Allocator()
	params := allocatedBytes(model)
	act := int64(B * W * 4)
	for step := 0; step < 3; step++ {
		err := ferry.Step(func(tape *ferry.Tape) error {
			x := tape.Adopt(ferry.Full(dev, 0.5, B, W))
			before := alloc.Allocated()
			if before != params+act {
				t.Errorf("before forward: %d bytes, want params %d + input %d", before, params, act)
			}
			alloc.ResetPeak()
			y := model.Forward(x)
			after := alloc.Allocated()
			peak := alloc.Stats().AllocatedBytes.Peak
			if after-before != L*act {
				t.Errorf("forward kept %d bytes, want %d (one activation per layer)", after-before, L*act)
			}
			if peak-after != act {
				t.Errorf("forward peak is %d above after-forward, want one activation %d", peak-after, act)
			}
			target := ferry.Zeros(dev, B, W)
			loss := ferry.MSELoss(y, target)
			target.Release()
			return loss.Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		// Leaves now hold gradients; the step's tensors are gone.
		if got := alloc.Allocated(); got != 2*params {
			t.Errorf("after step %d: %d bytes allocated, want params + grads = %d", step, got, 2*params)
		}
		for _, p := range model.Parameters() {
			p.SetGrad(nil)
		}
		if err := alloc.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	_ = optim.NewSGD
}

// allocatedBytes is what m's parameters take in the allocator (block sizes,
// rounded up as PyTorch rounds them).
func allocatedBytes(m nn.Module) int64 {
	var n int64
	for _, p := range m.Parameters() {
		n += device.RoundSize(p.Bytes())
	}
	return n
}

// Decision 3's test: after every training step, allocated bytes are exactly
// parameters + gradients + optimizer state, and every step peaks at the
// same bytes.
func TestStepsReturnToSteadyState(t *testing.T) {
	const L, W, B = 4, 96, 24
	for _, name := range []string{"sgd-momentum", "adamw"} {
		t.Run(name, func(t *testing.T) {
			dev := newCPU(t, device.Options{PoisonFreed: true})
			model := originModel(t, dev, L, W, 3)
			var opt optim.Optimizer
			states := 1 // tensors of optimizer state per parameter
			if name == "adamw" {
				opt, states = optim.NewAdamW(model.Parameters(), 1e-3), 2
			} else {
				s := optim.NewSGD(model.Parameters(), 1e-2)
				s.Momentum = 0.9
				opt = s
			}
			defer opt.Release()
			params := allocatedBytes(model)
			x := ferry.Randn(dev, rand.New(rand.NewPCG(1, 1)), B, W)
			y := ferry.Randn(dev, rand.New(rand.NewPCG(2, 2)), B, W)
			defer x.Release()
			defer y.Release()
			data := device.RoundSize(int64(B*W*4)) * 2
			alloc := dev.Allocator()
			var peaks []int64
			for step := 0; step < 4; step++ {
				alloc.ResetPeak()
				err := ferry.Step(func(tape *ferry.Tape) error {
					loss := ferry.MSELoss(model.Forward(tape.Input(x)), tape.Input(y))
					if err := loss.Backward(); err != nil {
						return err
					}
					return opt.Step()
				})
				if err != nil {
					t.Fatal(err)
				}
				st := alloc.Stats()
				want := params*int64(2+states) + data // parameters, gradients, state, and the data we hold
				if st.AllocatedBytes.Current != want {
					t.Errorf("step %d: %d bytes allocated, want %d", step, st.AllocatedBytes.Current, want)
				}
				if got := st.ByCategory[device.OptimizerState].Current; got != params*int64(states) {
					t.Errorf("step %d: optimizer state %d bytes, want %d", step, got, params*int64(states))
				}
				if got := st.ByCategory[device.Gradient].Current; got != params {
					t.Errorf("step %d: gradients %d bytes, want %d", step, got, params)
				}
				peaks = append(peaks, st.AllocatedBytes.Peak)
				opt.ZeroGrad()
			}
			// The first step allocates the optimizer state; from the second
			// on, every step is the same.
			for i := 2; i < len(peaks); i++ {
				if peaks[i] != peaks[1] {
					t.Errorf("peaks differ between steps: %v", peaks)
				}
			}
		})
	}
}
