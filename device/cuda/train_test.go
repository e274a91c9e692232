package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/cuda/fake"
	"ferry/optim"
)

// trainRun is a small MLP trained for a few steps on one device: two
// Linear layers with a ReLU between, MSE loss, AdamW. It returns each
// step's loss and, after the first backward, every parameter's gradient.
type trainRun struct {
	losses []float32
	grads  [][]float32
	params [][]float32 // after the last step
}

func train(t *testing.T, dev device.Device, steps int) trainRun {
	return trainIn(t, dev, steps, device.Float32)
}

// trainIn is train with the forward under autocast type prec.
func trainIn(t *testing.T, dev device.Device, steps int, prec device.DType) trainRun {
	t.Helper()
	const batch, in, hidden, out = 24, 20, 48, 10
	rng := rand.New(rand.NewPCG(11, 3))
	param := func(shape ...int) *ferry.Tensor {
		bound := float32(1 / math.Sqrt(float64(shape[len(shape)-1])))
		return ferry.Uniform(dev, rng, -bound, bound, shape...).SetCategory(device.Parameter).RequireGrad()
	}
	w1, b1, w2, b2 := param(hidden, in), param(hidden), param(out, hidden), param(out)
	params := []*ferry.Tensor{w1, b1, w2, b2}
	defer func() {
		for _, p := range params {
			p.Release()
		}
	}()
	xs := make([]float32, batch*in)
	ys := make([]float32, batch*out)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	for i := range ys {
		ys[i] = float32(rng.NormFloat64())
	}
	opt := optim.NewAdamW(params, 1e-2)
	defer opt.Release()
	var r trainRun
	for step := 0; step < steps; step++ {
		err := ferry.Step(func(tape *ferry.Tape) error {
			x := tape.Adopt(ferry.FromFloat32s(dev, xs, batch, in))
			y := tape.Adopt(ferry.FromFloat32s(dev, ys, batch, out))
			var out *ferry.Tensor
			tape.Autocast(prec, func() {
				h := ferry.ReLU(ferry.Linear(x, w1, b1))
				out = ferry.Linear(h, w2, b2)
			})
			if out.DType() != prec {
				t.Fatalf("%s: the output is %s under autocast %s", dev.Name(), out.DType(), prec)
			}
			loss := ferry.MSELoss(out, y)
			r.losses = append(r.losses, loss.Item())
			return loss.Backward()
		})
		if err != nil {
			t.Fatalf("%s step %d: %v", dev.Name(), step, err)
		}
		if step == 0 {
			for _, p := range params {
				r.grads = append(r.grads, p.Grad().Float32s())
			}
		}
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		opt.ZeroGrad()
	}
	for _, p := range params {
		r.params = append(r.params, p.Float32s())
	}
	return r
}

func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var scale, diff float64
	for i := range want {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
	}
	if diff > tol*math.Max(scale, 1e-30) || math.IsNaN(diff) {
		t.Errorf("%s: max difference %.3g, scale %.3g", what, diff, scale)
	}
}

// A training step on the CUDA device (fake driver) gives the CPU device's
// loss, gradients and updated parameters.
func TestTrainingMatchesCPU(t *testing.T) {
	gpu, drv := openFake(t, fake.Options{SMs: 4}, device.Options{PoisonFreed: true})
	c, err := cpu.New(device.Options{PoisonFreed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := train(t, c, 3)
	got := train(t, gpu, 3)
	closeTo(t, "losses", got.losses, want.losses, 1e-5)
	for i := range want.grads {
		closeTo(t, fmt.Sprintf("gradient of parameter %d", i), got.grads[i], want.grads[i], 1e-5)
		closeTo(t, fmt.Sprintf("parameter %d after 3 steps", i), got.params[i], want.params[i], 1e-5)
	}
	if got.losses[2] >= got.losses[0] {
		t.Errorf("loss did not fall: %v", got.losses)
	}
	if n := drv.Context(0).Stats().Launches; n < 30 {
		t.Errorf("only %d kernels ran", n)
	}
	// Everything the steps made is freed; what remains is the parameters,
	// the optimizer state (released by train) and cuBLAS's workspace.
	st := gpu.Allocator().Stats()
	if st.AllocatedBytes.Current != st.ByCategory[device.Workspace].Current {
		t.Errorf("after training: %s; by category %v", st, st.ByCategory)
	}
	if err := gpu.Allocator().CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// In bfloat16 mixed precision too: the CUDA device (fake driver: cuBLAS's
// bfloat16 product, the convert kernel, one-pass elementwise kernels on
// bfloat16 views) trains as the CPU device (VDPBF16PS or widened
// products, one-pass elementwise kernels) does, up to bfloat16's rounding
// of sums taken in another order.
func TestTrainingMatchesCPUInBF16(t *testing.T) {
	gpu, _ := openFake(t, fake.Options{SMs: 4}, device.Options{PoisonFreed: true})
	c, err := cpu.New(device.Options{PoisonFreed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := trainIn(t, c, 3, device.BFloat16)
	got := trainIn(t, gpu, 3, device.BFloat16)
	fp := trainIn(t, c, 3, device.Float32)
	closeTo(t, "losses", got.losses, want.losses, 1e-2)
	for i := range want.grads {
		closeTo(t, fmt.Sprintf("gradient of parameter %d", i), got.grads[i], want.grads[i], 3e-2)
		closeTo(t, fmt.Sprintf("parameter %d after 3 steps", i), got.params[i], want.params[i], 1e-2)
	}
	if fmt.Sprint(want.losses) == fmt.Sprint(fp.losses) {
		t.Errorf("bfloat16 losses equal float32's %v: autocast did nothing", fp.losses)
	}
	st := gpu.Allocator().Stats()
	if st.AllocatedBytes.Current != st.ByCategory[device.Workspace].Current {
		t.Errorf("after training: %s; by category %v", st, st.ByCategory)
	}
}
