package cpu_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"ferry/device"
	"ferry/device/cpu"
)

// benchView allocates a contiguous view of shape filled with normal values.
func benchView(b *testing.B, d device.Device, r *rand.Rand, shape ...int) device.View {
	n := device.Numel(shape)
	blk, err := d.Allocator().Alloc(int64(4*n), device.Activation)
	if err != nil {
		b.Fatal(err)
	}
	v := device.View{Block: blk, Shape: shape, Strides: device.Contiguous(shape)}
	for i := range vals(v) {
		vals(v)[i] = float32(r.NormFloat64())
	}
	return v
}

// BenchmarkGemm runs the CPU device's Gemm kernel with each backend on the
// products of the origin model's step (Linear(1024) at batch 256: forward
// x·Wᵀ, input gradient g·W, weight gradient gᵀ·x) and on squares.
func BenchmarkGemm(b *testing.B) {
	b.Log(cpu.Paths())
	shapes := []struct {
		name           string
		m, n, k        int
		transA, transB bool
	}{
		{"linear_fwd_NT_256x1024x1024", 256, 1024, 1024, false, true},
		{"linear_dX_NN_256x1024x1024", 256, 1024, 1024, false, false},
		{"linear_dW_TN_1024x1024x256", 1024, 1024, 256, true, false},
		{"square_256", 256, 256, 256, false, false},
		{"square_1024", 1024, 1024, 1024, false, false},
		{"square_1024_TT", 1024, 1024, 1024, true, true},
		{"square_2048", 2048, 2048, 2048, false, false},
		{"odd_1023x1025x1023", 1023, 1025, 1023, false, false},
	}
	for _, backend := range []string{"blas", "go"} {
		for _, s := range shapes {
			b.Run(backend+"/"+s.name, func(b *testing.B) {
				if err := cpu.SetMatmulBackend(backend); err != nil {
					b.Skip(err)
				}
				defer cpu.SetMatmulBackend("auto")
				d := open(&testing.T{}, device.Options{})
				defer d.Close()
				r := rand.New(rand.NewPCG(1, 2))
				a, bb, c := benchView(b, d, r, s.m*s.k), benchView(b, d, r, s.k*s.n), benchView(b, d, r, s.m*s.n)
				p := device.GemmParams{TransA: s.transA, TransB: s.transB, M: s.m, N: s.n, K: s.k, Alpha: 1,
					A: a.Block, B: bb.Block, C: c.Block, LDA: s.k, LDB: s.n, LDC: s.n, Batch: 1}
				if s.transA {
					p.LDA = s.m
				}
				if s.transB {
					p.LDB = s.k
				}
				k := d.Kernels()
				for b.Loop() {
					if err := k.Gemm(p); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkElementwise runs the kernels of a Linear+ReLU training step on
// one layer's activations (256×1024, 1 MiB: cache-resident) and on 16 MiB
// (4096×1024, past the caches of a small machine), and a plain copy of the
// same bytes. GB/s counts the bytes each kernel must read and write;
// "×copy" is its GB/s over the copy's (Go's copy, on one goroutine): 1
// means the kernel runs at the speed of moving its bytes. copy_kernel is
// the device's Copy kernel, which splits big copies across goroutines as
// the other kernels do.
func BenchmarkElementwise(b *testing.B) {
	b.Log(cpu.Paths())
	for _, rows := range []int{256, 4096} {
		const cols = 1024
		n := rows * cols
		d := open(&testing.T{}, device.Options{})
		r := rand.New(rand.NewPCG(1, 2))
		x, y, z := benchView(b, d, r, rows, cols), benchView(b, d, r, rows, cols), benchView(b, d, r, rows, cols)
		bias, sum := benchView(b, d, r, cols), benchView(b, d, r, cols)
		k := d.Kernels()
		fk, fused := k.(interface { // device.FusedKernels (spelt out for older trees)
			BiasReLU(dst, src, bias device.View) error
			ReLUBackwardSum(dst, sum, grad, out device.View) error
		})
		bb := bias
		bb.Shape, bb.Strides = []int{rows, cols}, []int{0, 1}
		xs, zs := vals(x), vals(z)
		kernels := []struct {
			name  string
			bytes int // read + written
			run   func() error
		}{
			{"copy", 8 * n, func() error { copy(zs, xs); return nil }},
			{"copy_kernel", 8 * n, func() error { return k.Copy(z, x) }},
			{"relu", 8 * n, func() error { return k.Unary(device.ReLU, z, x, 0) }},
			{"relu_backward", 12 * n, func() error { return k.Binary(device.ReLUGrad, z, x, y) }},
			{"add", 12 * n, func() error { return k.Binary(device.Add, z, x, y) }},
			{"scale", 8 * n, func() error { return k.Unary(device.Scale, z, x, 0.5) }},
			{"bias_add", 8 * n, func() error { return k.Binary(device.Add, z, x, bb) }},
			{"bias_relu_fused", 8 * n, func() error { return fk.BiasReLU(z, x, bias) }},
			{"relu_backward_bias_sum_fused", 12 * n, func() error { return fk.ReLUBackwardSum(z, sum, x, y) }},
			{"bias_grad_sum_rows", 4 * n, func() error {
				s := sum
				s.Shape, s.Strides = []int{1, cols}, []int{cols, 1}
				return k.Sum(s, x, 1)
			}},
			{"sgd_step", 12 * n, func() error {
				return k.(device.OptimizerKernels).SGDStep(z, x, device.View{}, device.SGDParams{LR: 1e-9})
			}},
		}
		var copyGBs float64
		for _, kn := range kernels {
			if !fused && strings.Contains(kn.name, "fused") {
				continue
			}
			b.Run(fmt.Sprintf("%dKiB/%s", 4*n>>10, kn.name), func(b *testing.B) {
				b.SetBytes(int64(kn.bytes))
				for b.Loop() {
					if err := kn.run(); err != nil {
						b.Fatal(err)
					}
				}
				gbs := float64(kn.bytes) * float64(b.N) / b.Elapsed().Seconds() / 1e9
				if kn.name == "copy" {
					copyGBs = gbs
				}
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(gbs/copyGBs, "×copy")
			})
		}
		d.Close()
	}
}

// BenchmarkGemmGPT runs the CPU device's Gemm kernel on the GPT step's
// products with each backend, and prints which path ran (cpu.Paths): run
// it under FERRY_CPU=avx2 (and OPENBLAS_CORETYPE=Haswell) for the paths of
// an AVX2-only CPU. "ms/step" is the time of one product times the number
// a step runs.
func BenchmarkGemmGPT(b *testing.B) {
	for _, backend := range []string{"auto", "blas", "go"} {
		if err := cpu.SetMatmulBackend(backend); err != nil {
			b.Logf("%s: %v", backend, err)
			continue
		}
		b.Logf("%s: %s", backend, cpu.Paths())
		cpu.SetMatmulBackend("auto")
		for _, s := range cpu.GPTShapes {
			b.Run(backend+"/"+s.Name, func(b *testing.B) {
				if err := cpu.SetMatmulBackend(backend); err != nil {
					b.Skip(err)
				}
				defer cpu.SetMatmulBackend("auto")
				d := open(&testing.T{}, device.Options{})
				defer d.Close()
				lda, ldb := s.K, s.N
				if s.TransA {
					lda = s.M
				}
				if s.TransB {
					ldb = s.K
				}
				lda, ldb = max(lda, s.LDA), max(ldb, s.LDB)
				ar, br := s.M, s.K
				if s.TransA {
					ar = s.K
				}
				if s.TransB {
					br = s.N
				}
				r := rand.New(rand.NewPCG(1, 2))
				a, bb, c := benchView(b, d, r, ar*lda), benchView(b, d, r, br*ldb), benchView(b, d, r, s.M*s.N)
				p := device.GemmParams{TransA: s.TransA, TransB: s.TransB, M: s.M, N: s.N, K: s.K, Alpha: 1,
					A: a.Block, B: bb.Block, C: c.Block, LDA: lda, LDB: ldb, LDC: s.N, Batch: 1}
				k := d.Kernels()
				for b.Loop() {
					if err := k.Gemm(p); err != nil {
						b.Fatal(err)
					}
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(2*float64(s.M)*float64(s.N)*float64(s.K)/sec/1e9, "GFLOP/s")
				b.ReportMetric(sec*1e3*float64(s.PerStep), "ms/step")
			})
		}
	}
}
