package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cuda/fake"
	"ferry/offload"
	"ferry/optim"
)

// streamedRun trains the small MLP of trainIn with its parameters built
// on the device's host and streamed from there, gradients sent to the
// host and AdamW stepping there (inside backward, beside the device, with
// inBwd), and returns the losses, the parameters after the last step and
// the device's peak of parameter bytes.
func streamedRun(t *testing.T, dev device.Device, steps int, inBwd bool) (losses []float32, params [][]float32, peak int64) {
	t.Helper()
	const batch, in, hidden, out = 24, 20, 48, 10
	rng := rand.New(rand.NewPCG(11, 3))
	host := dev.Host()
	param := func(shape ...int) *ferry.Tensor {
		bound := float32(1 / math.Sqrt(float64(shape[len(shape)-1])))
		return ferry.Uniform(host, rng, -bound, bound, shape...).SetCategory(device.Parameter).RequireGrad()
	}
	w1, b1, w2, b2 := param(hidden, in), param(hidden), param(out, hidden), param(out)
	ps := []*ferry.Tensor{w1, b1, w2, b2}
	s, err := offload.NewStreamer(dev, offload.StreamConfig{Params: ps, Grads: ps, HostStepsBeside: inBwd, Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	xs := make([]float32, batch*in)
	ys := make([]float32, batch*out)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	for i := range ys {
		ys[i] = float32(rng.NormFloat64())
	}
	opt := optim.NewAdamW(ps, 1e-2, optim.OnHost())
	dev.Allocator().ResetPeak()
	for step := 0; step < steps; step++ {
		if err := s.BeginStep(); err != nil {
			t.Fatal(err)
		}
		err := ferry.Step(func(tape *ferry.Tape) error {
			s.Attach(tape)
			x := tape.Adopt(ferry.FromFloat32s(dev, xs, batch, in))
			y := tape.Adopt(ferry.FromFloat32s(dev, ys, batch, out))
			h := ferry.ReLU(ferry.Linear(x, w1, b1))
			loss := ferry.MSELoss(ferry.Linear(h, w2, b2), y)
			losses = append(losses, loss.Item())
			if inBwd {
				o, e := optim.InBackward(opt)
				if err := s.Backward(loss, o); err != nil {
					return err
				}
				return e.Err()
			}
			return s.Backward(loss, ferry.BackwardOptions{})
		})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if !inBwd {
			if err := opt.Step(); err != nil {
				t.Fatal(err)
			}
			opt.ZeroGrad()
		}
		if err := s.EndStep(); err != nil {
			t.Fatal(err)
		}
	}
	peak = dev.Allocator().Stats().ByCategory[device.Parameter].Peak
	// The last step's host updates may still run: they finish before the
	// optimizer's state goes.
	if err := s.Settle(); err != nil {
		t.Fatal(err)
	}
	opt.Release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		params = append(params, p.Float32s())
		p.Release()
	}
	return losses, params, peak
}

// On the CUDA device (fake driver), parameters streamed from pinned host
// memory, gradients sent there and AdamW on the host train as the device
// alone does, and the device never holds every parameter at once.
func TestStreamingOnCUDA(t *testing.T) {
	for _, inBwd := range []bool{false, true} {
		t.Run(fmt.Sprintf("inBackward=%v", inBwd), func(t *testing.T) {
			gpu, _ := openFake(t, fake.Options{SMs: 4}, device.Options{PoisonFreed: true})
			want := train(t, gpu, 3)
			losses, params, peak := streamedRun(t, gpu, 3, inBwd)
			closeTo(t, "losses", losses, want.losses, 1e-5)
			for i := range want.params {
				closeTo(t, fmt.Sprintf("parameter %d after 3 steps", i), params[i], want.params[i], 1e-5)
			}
			const all = 4096 + 512 + 2048 + 512 // every parameter, in 512-byte blocks
			if peak >= all {
				t.Errorf("the device held %d bytes of parameters at once, all of them (%d)", peak, all)
			}
			if err := gpu.Allocator().CheckInvariants(); err != nil {
				t.Error(err)
			}
		})
	}
}
