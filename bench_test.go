package ferry_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/internal/blas"
	"ferry/nn"
	"ferry/optim"
)

// trainStep is one step of the origin experiment as PyTorch's reference
// loop writes it: forward through model, MSE against target, backward, SGD
// step, zero_grad(set_to_none=True).
func trainStep(model nn.Module, opt optim.Optimizer, x, target *ferry.Tensor) error {
	return ferry.Step(func(tape *ferry.Tape) error {
		y := model.Forward(tape.Input(x))
		loss := ferry.MSELoss(y, target)
		if err := loss.Backward(); err != nil {
			return err
		}
		if err := opt.Step(); err != nil {
			return err
		}
		opt.ZeroGrad()
		return nil
	})
}

// unfused runs its modules one after another, as a hand-written loop
// would: Linear then ReLU, never ferry.LinearReLU (which nn.Sequential
// uses).
type unfused struct{ *nn.Sequential }

func (u unfused) Forward(x *ferry.Tensor) *ferry.Tensor {
	h := x
	for _, m := range u.Modules {
		next := m.Forward(h)
		if h != x {
			h.Release()
		}
		h = next
	}
	return h
}

// BenchmarkTrainStep times whole training steps of L × (Linear(W) + ReLU)
// at batch B on the CPU device, with each matrix-product backend, through
// nn.Sequential (Linear+ReLU fused) and, for the origin model, through a
// plain loop (unfused). Its allocs/op and B/op are the Go heap's per step
// after warm-up: they grow with the number of ops (layers), never with the
// tensors' sizes.
func BenchmarkTrainStep(b *testing.B) {
	for _, c := range []struct {
		layers, width, batch int
		unfused              bool
	}{
		{10, 1024, 256, false}, {40, 1024, 256, false}, {40, 64, 32, false}, {40, 1024, 256, true},
	} {
		for _, backend := range []string{"blas", "go"} {
			name := fmt.Sprintf("L%d_W%d_B%d/%s", c.layers, c.width, c.batch, backend)
			if c.unfused {
				name += "/unfused"
			}
			b.Run(name, func(b *testing.B) {
				if err := cpu.SetMatmulBackend(backend); err != nil {
					b.Skip(err)
				}
				defer cpu.SetMatmulBackend("auto")
				dev := newCPU(b, device.Options{})
				seq := originModel(b, dev, c.layers, c.width, 1)
				defer nn.Release(seq)
				var model nn.Module = seq
				if c.unfused {
					model = unfused{seq}
				}
				rng := rand.New(rand.NewPCG(2, 0))
				x := ferry.Randn(dev, rng, c.batch, c.width)
				target := ferry.Randn(dev, rng, c.batch, c.width)
				defer x.Release()
				defer target.Release()
				opt := optim.NewSGD(model.Parameters(), 1e-3)
				defer opt.Release()
				for range 2 { // warm up: the allocator's cache, the GEMM's pools
					if err := trainStep(model, opt, x, target); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if err := trainStep(model, opt, x, target); err != nil {
						b.Fatal(err)
					}
				}
				// Forward, weight gradient and input gradient (none for the
				// first layer: its input needs none).
				flops := 2 * float64(3*c.layers-1) * float64(c.batch) * float64(c.width) * float64(c.width)
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkMatMulVsBLAS measures what ferry's op path (output allocation
// from the caching allocator, shape checks, dispatch to the device, the
// handle's release) costs over calling OpenBLAS's sgemm directly, on the
// products of the origin model's training step and a few squares. Each
// iteration times both, back to back, so that load from other processes
// falls on both alike; ratio is the median over iterations of ferry's
// GFLOP/s over the direct call's (1 = no overhead). The direct call runs
// OpenBLAS as the CPU device leaves it, on one thread while ferry splits
// its products over the cores (device/cpu Note [OpenBLAS on one thread]):
// run with FERRY_BLAS_THREADS=openblas to compare like with like.
func BenchmarkMatMulVsBLAS(b *testing.B) {
	if !blas.Available() {
		b.Skip("no OpenBLAS:", blas.Reason())
	}
	if err := cpu.SetMatmulBackend("blas"); err != nil {
		b.Skip(err)
	}
	defer cpu.SetMatmulBackend("auto")
	type shape struct {
		name    string
		m, n, k int
		op      string // how ferry is called
	}
	for _, s := range []shape{
		{"linear_fwd_x·Wt_256x1024x1024", 256, 1024, 1024, "linear"},
		{"linear_dX_g·W_256x1024x1024", 256, 1024, 1024, "nn"},
		{"linear_dW_gt·x_1024x1024x256", 1024, 1024, 256, "tn"},
		{"matmul_8", 8, 8, 8, "nn"},
		{"matmul_256", 256, 256, 256, "nn"},
		{"matmul_1024", 1024, 1024, 1024, "nn"},
		{"matmul_1024_NT", 1024, 1024, 1024, "nt"},
		{"matmul_2048", 2048, 2048, 2048, "nn"},
	} {
		b.Run(s.name, func(b *testing.B) {
			dev := newCPU(b, device.Options{})
			rng := rand.New(rand.NewPCG(3, 3))
			// Operands as stored: A is m×k (k×m for "tn"), B k×n (n×k
			// for "nt" and "linear").
			ar, ac, br, bc := s.m, s.k, s.k, s.n
			if s.op == "tn" {
				ar, ac = s.k, s.m
			}
			if s.op == "nt" || s.op == "linear" {
				br, bc = s.n, s.k
			}
			A, B := ferry.Randn(dev, rng, ar, ac), ferry.Randn(dev, rng, br, bc)
			defer A.Release()
			defer B.Release()
			C := ferry.Empty(dev, s.m, s.n)
			defer C.Release()
			ferryOp := func() {
				var out *ferry.Tensor
				switch s.op {
				case "linear":
					out = ferry.Linear(A, B, nil)
				case "nn":
					out = ferry.MatMul(A, B)
				case "tn":
					at := A.T()
					out = ferry.MatMul(at, B)
					at.Release()
				case "nt":
					bt := B.T()
					out = ferry.MatMul(A, bt)
					bt.Release()
				}
				out.Release()
			}
			ptr := func(t *ferry.Tensor) unsafe.Pointer {
				blk, off := t.Block()
				return unsafe.Pointer(&cpu.Bytes(blk)[4*off])
			}
			pa, pb, pc := ptr(A), ptr(B), ptr(C)
			ta, tb := s.op == "tn", s.op == "nt" || s.op == "linear"
			direct := func() { blas.Sgemm(ta, tb, s.m, s.n, s.k, 1, pa, ac, pb, bc, 0, pc, s.n) }
			ferryOp()
			direct()
			var tf, td, ratios []float64
			timed := func(f func()) float64 {
				t0 := time.Now()
				f()
				return time.Since(t0).Seconds()
			}
			for i := 0; b.Loop(); i++ {
				var f, d float64
				if i%2 == 0 { // alternate which goes first
					f, d = timed(ferryOp), timed(direct)
				} else {
					d, f = timed(direct), timed(ferryOp)
				}
				tf, td, ratios = append(tf, f), append(td, d), append(ratios, d/f)
			}
			flop := 2 * float64(s.m) * float64(s.n) * float64(s.k)
			b.ReportMetric(flop/median(tf)/1e9, "ferry-GFLOP/s")
			b.ReportMetric(flop/median(td)/1e9, "blas-GFLOP/s")
			b.ReportMetric(median(ratios), "ratio")
		})
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	return s[len(s)/2]
}
