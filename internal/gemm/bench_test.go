package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

type benchShape struct {
	name           string
	m, n, k        int
	transA, transB bool
}

var benchShapes = []benchShape{
	{"256", 256, 256, 256, false, false},
	{"1024", 1024, 1024, 1024, false, false},
	{"2048", 2048, 2048, 2048, false, false},
	{"Linear1024_b256_fwd_NT", 256, 1024, 1024, false, true},
	{"Linear1024_b256_dX_NN", 256, 1024, 1024, false, false},
	{"Linear1024_b256_dW_TN", 1024, 1024, 256, true, false},
}

// benchFamily benchmarks family f (variant picked per shape, as Sgemm does).
func benchFamily(b *testing.B, f *family, s benchShape, nw int) {
	benchKernel(b, f.pick(s.m, s.n), s, nw)
}

func benchKernel(b *testing.B, kern *kernelInfo, s benchShape, nw int) {
	r := rand.New(rand.NewPCG(5, 6))
	lda, ldb := s.k, s.n
	if s.transA {
		lda = s.m
	}
	if s.transB {
		ldb = s.k
	}
	a, bb := randSlice(r, s.m*s.k), randSlice(r, s.k*s.n)
	c := make([]float32, s.m*s.n)
	for b.Loop() {
		sgemm(kern, nw, s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
	}
	flops := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N)
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkSgemm runs the benchmark shapes with each supported kernel
// (avx512, avx2, generic) using SetWorkers goroutines.
func BenchmarkSgemm(b *testing.B) {
	nw := numWorkers()
	for _, name := range Kernels() {
		f := families[name]
		for _, s := range benchShapes {
			if name == "generic" && s.m*s.n*s.k > 1<<30 {
				continue // too slow to be interesting
			}
			b.Run(name+"/"+s.name, func(b *testing.B) { benchFamily(b, f, s, nw) })
		}
	}
}

// BenchmarkSgemmSmall compares one worker with all workers on small cubes.
func BenchmarkSgemmSmall(b *testing.B) {
	nw := numWorkers()
	for _, sz := range []int{32, 64, 128, 192} {
		s := benchShape{fmt.Sprint(sz), sz, sz, sz, false, false}
		for _, w := range []int{1, nw} {
			b.Run(fmt.Sprintf("%s/%d/w%d", Kernel(), sz, w), func(b *testing.B) { benchFamily(b, active, s, w) })
		}
	}
}

// BenchmarkMicroKernel measures each micro-kernel variant alone on
// L1-resident panels (kc = 256): the single-core ceiling.
func BenchmarkMicroKernel(b *testing.B) {
	for _, kern := range allKernels() {
		b.Run(kern.name, func(b *testing.B) {
			kc := 256
			a := make([]float32, kern.mr*kc)
			bb := make([]float32, kern.nr*kc)
			c := make([]float32, kern.mr*kern.nr)
			for b.Loop() {
				kern.fn(kc, &a[0], &bb[0], &c[0], kern.nr, 1, 1)
			}
			flops := 2 * float64(kern.mr*kern.nr*kc) * float64(b.N)
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkPack measures the packing primitives of each kernel variant
// (source 1024×1024, one MC×KC block of A and a KC×512 block of B).
func BenchmarkPack(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const ld = 1024
	src := randSlice(r, 1024*ld)
	for _, kern := range allKernels() {
		for _, tr := range []bool{false, true} {
			p := &problem{args: args{k: kern, a: src, b: src, lda: ld, ldb: ld, transA: tr, transB: tr}}
			mc, kc, nc := kern.mc, kern.kc, 512
			dst := make([]float32, max(mc, nc)*kc)
			name := map[bool]string{false: "N", true: "T"}[tr]
			b.Run(kern.name+"/A"+name, func(b *testing.B) {
				for b.Loop() {
					p.packA(dst, 0, 0, mc, kc)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(mc*kc), "ns/elem")
			})
			b.Run(kern.name+"/B"+name, func(b *testing.B) {
				for b.Loop() {
					p.packB(dst, 0, 0, kc, nc)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nc*kc), "ns/elem")
			})
		}
	}
}

// BenchmarkGemmBF16 runs the benchmark shapes as float32 (Sgemm) and as
// bfloat16 (GemmBF16, with the kernel it picks) side by side, on
// SetWorkers goroutines.
func BenchmarkGemmBF16(b *testing.B) {
	nw := numWorkers()
	shapes := append(benchShapes[:2:2], benchShapes[3:]...)
	shapes = append(shapes, benchShape{"1024_TN", 1024, 1024, 1024, true, false}, benchShape{"1024_TT", 1024, 1024, 1024, true, true})
	for _, s := range shapes {
		b.Run(s.name+"/float32", func(b *testing.B) { benchFamily(b, active, s, nw) })
		b.Run(s.name+"/bfloat16", func(b *testing.B) { benchBF16(b, pickBF16(s.m, s.n), s, nw) })
	}
}

func benchBF16(b *testing.B, kern *kernelInfo, s benchShape, nw int) {
	r := rand.New(rand.NewPCG(5, 6))
	lda, ldb := s.k, s.n
	if s.transA {
		lda = s.m
	}
	if s.transB {
		ldb = s.k
	}
	a, bb := randSlice(r, s.m*s.k), randSlice(r, s.k*s.n)
	a16, b16 := roundSlice(a), roundSlice(bb)
	c := make([]float32, s.m*s.n)
	for b.Loop() {
		gemmBF16(kern, nw, s.transA, s.transB, s.m, s.n, s.k, 1, a16, lda, b16, ldb, 0, c, s.n)
	}
	flops := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N)
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
