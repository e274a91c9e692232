package nccl_test

import (
	"math"
	"testing"
	"time"

	"ferry"
	"ferry/device"
	"ferry/device/cuda"
	"ferry/device/cuda/cu"
	"ferry/device/cuda/fake"
	"ferry/dist"
	"ferry/nn"
	"ferry/optim"
)

// zero3OneRank trains wideNet for 3 AdamW steps with clipping on dev,
// unsharded and under ZeRO-3 on one rank (dist.Local: every shard is a
// whole parameter, every gather a copy through the device's kernels),
// in float32 or in bfloat16 autocast (precision; ZeRO-3 then gathers
// bfloat16 copies of the weights, rounded by the device's Convert), and
// fails unless the parameters agree bit for bit. With offload, ZeRO-3
// keeps the optimizer's state and its shards in host memory and steps
// each shard beside the device as its gradient lands (no clipping then).
// It returns the sharded steps' median time.
func zero3OneRank(t *testing.T, dev device.Device, precision device.DType, offload ...bool) time.Duration {
	off := len(offload) > 0 && offload[0]
	t.Helper()
	var got [2][][]float32
	var times []time.Duration
	for k, sharded := range []bool{false, true} {
		m, err := wideNet(dev, 9)
		if err != nil {
			t.Fatal(err)
		}
		ps := m.Parameters()
		var fs *dist.FullShard
		var where []optim.Option
		if off { // both runs step on the host (the host's kernels are not the GPU's)
			where = append(where, optim.OnHost())
		}
		var opt optim.Optimizer = optim.NewAdamW(ps, 0.01, where...)
		var fopt *dist.FullShardOptimizer
		if sharded {
			if fs, err = dist.NewFullShard(dist.Local(), ps, dist.FullShardOptions{ParamType: precision, ShardsOnHost: off}); err != nil {
				t.Fatal(err)
			}
			if err := fs.Shard(); err != nil {
				t.Fatal(err)
			}
			inner, err := optim.Like(opt, fs.Shards())
			if err != nil {
				t.Fatal(err)
			}
			opt.Release()
			if fopt, err = fs.Optimizer(inner.(optim.Stepper)); err != nil {
				t.Fatal(err)
			}
			opt = fopt
		}
		for step := 1; step <= 3; step++ {
			t0 := time.Now()
			x := ferry.FromFloat32s(dev, make([]float32, 6*24), 6, 24)
			x.FillInPlace(float32(step) / 10)
			y := ferry.FromFloat32s(dev, make([]float32, 6*5), 6, 5)
			y.FillInPlace(-0.5)
			if fs != nil {
				if err := fs.BeginStep(); err != nil {
					t.Fatal(err)
				}
			}
			if fs != nil && off {
				o, upd := optim.InBackward(fopt.Inner())
				if err := fs.SetStepBeside(func(s *ferry.Tensor) error { o.GradReady(s); return upd.Err() }); err != nil {
					t.Fatal(err)
				}
			}
			err := ferry.Step(func(tape *ferry.Tape) error {
				opts := ferry.BackwardOptions{}
				if fs != nil {
					fs.Attach(tape)
					fs.SetReduce(true)
					opts.GradReady = fs.GradReady
				}
				var loss *ferry.Tensor
				tape.Autocast(precision, func() { loss = ferry.MSELoss(m.Forward(tape.Input(x)), tape.Input(y)) })
				return loss.BackwardWith(opts)
			})
			x.Release()
			y.Release()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case fs != nil:
				if err := fs.Wait(); err != nil {
					t.Fatal(err)
				}
				if !off {
					_, err = fs.ClipGradNorm(0.1)
				}
			case !off:
				_, err = optim.ClipGradNorm(ps, 0.1)
			}
			if err != nil {
				t.Fatal(err)
			}
			if fs == nil || !off { // offloaded, the shards stepped beside
				if err := opt.Step(); err != nil {
					t.Fatal(err)
				}
				opt.ZeroGrad()
			}
			if fs != nil {
				if err := fs.EndStep(); err != nil {
					t.Fatal(err)
				}
			}
			if err := dev.Compute().Synchronize(); err != nil {
				t.Fatal(err)
			}
			if sharded {
				times = append(times, time.Since(t0))
			}
		}
		opt.Release()
		if fs != nil {
			if err := fs.Close(); err != nil { // whole again
				t.Fatal(err)
			}
		}
		for _, p := range ps {
			got[k] = append(got[k], p.Float32s())
		}
		nn.Release(m)
	}
	for i := range got[0] {
		for j := range got[0][i] {
			if math.Float32bits(got[0][i][j]) != math.Float32bits(got[1][i][j]) {
				t.Fatalf("parameter %d[%d]: %v unsharded, %v under ZeRO-3", i, j, got[0][i][j], got[1][i][j])
			}
		}
	}
	return times[len(times)/2]
}

// ZeRO-3 on one rank of a fake GPU trains as without it, bit for bit,
// in float32 and in bfloat16.
func TestFullShardOneRankOnCUDAFake(t *testing.T) {
	dev, err := cuda.Open(fake.New(fake.Options{}), 0, device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	zero3OneRank(t, dev, device.Float32)
	zero3OneRank(t, dev, device.BFloat16)
	zero3OneRank(t, dev, device.Float32, true)
	zero3OneRank(t, dev, device.BFloat16, true)
}

// The same on a real GPU (FERRY_CUDA_REAL=1; scripts/gpu-check.sh's zero3
// step): ZeRO-3's gathers, reduce-scatters and sharded optimizer on one
// rank against the unsharded step, bit for bit.
func TestRealGPUFullShardOneRank(t *testing.T) {
	if !realGPU {
		t.Skip("runs on a GPU: set FERRY_CUDA_REAL=1 (scripts/gpu-check.sh does)")
	}
	drv, err := cu.Load()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := cuda.Open(drv, 0, device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	t.Logf("one ZeRO-3 step of a 2-layer MLP on %s: %v (median of 3)", dev.Name(), zero3OneRank(t, dev, device.Float32))
	t.Logf("the same in bf16, the weights gathered as bfloat16 copies: %v (median of 3)", zero3OneRank(t, dev, device.BFloat16))
	t.Logf("the same offloaded, the shards and AdamW's state in host memory, stepped beside the device: %v (median of 3)", zero3OneRank(t, dev, device.Float32, true))
}
