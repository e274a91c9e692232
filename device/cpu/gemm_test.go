package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"ferry/internal/blas"
	"ferry/internal/gemm"

	"golang.org/x/sys/unix"
)

// TestBLASSplit checks that a product cut into blocks of rows or columns
// (blasSplit) gives the same bits on one goroutine as on two, and
// agrees with one OpenBLAS call to rounding, for every transpose, with
// leading dimensions wider than the matrices and odd sizes.
func TestBLASSplit(t *testing.T) {
	if !blas.Available() {
		t.Skip(blas.Reason())
	}
	if blasOwnThreads() {
		t.Skip("OpenBLAS keeps its own threads (FERRY_BLAS_THREADS=openblas)")
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, s := range []struct{ m, n, k int }{{517, 131, 97}, {131, 517, 97}, {64, 1030, 80}, {300, 300, 47}} {
		if s.m*s.n*s.k < blasSplitMin {
			t.Fatalf("%v is below blasSplitMin: it would not be split", s)
		}
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			ar, ac, br, bc := s.m, s.k, s.k, s.n
			if tr[0] {
				ar, ac = ac, ar
			}
			if tr[1] {
				br, bc = bc, br
			}
			lda, ldb, ldc := ac+3, bc+5, s.n+1
			fill := func(n int) []float32 {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				return x
			}
			a, b, c0 := fill(ar*lda), fill(br*ldb), fill(s.m*ldc)
			want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
			blasSgemm(tr[0], tr[1], s.m, s.n, s.k, 0.5, a, lda, b, ldb, 0.25, want, ldc)
			prev := runtime.GOMAXPROCS(2)
			blasSplit(tr[0], tr[1], s.m, s.n, s.k, 0.5, a, lda, b, ldb, 0.25, got, ldc)
			runtime.GOMAXPROCS(1)
			one := append([]float32(nil), c0...)
			blasSplit(tr[0], tr[1], s.m, s.n, s.k, 0.5, a, lda, b, ldb, 0.25, one, ldc)
			runtime.GOMAXPROCS(prev)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(one[i]) {
					t.Fatalf("%v trans %v: c[%d] = %g split on 2 goroutines, %g on one", s, tr, i, got[i], one[i])
				}
				// Within a few rounding errors of a k-term sum of products
				// of normal values: 1e-5 relative to √k.
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*math.Sqrt(float64(s.k))*max(1, math.Abs(float64(want[i]))) {
					t.Fatalf("%v trans %v: c[%d] = %g split, %g in one call", s, tr, i, got[i], want[i])
				}
			}
		}
	}
}

// gptShapes are the products of the baby GPT's training step (6 layers,
// embedding 384, heads of 64, sequence 256, batch 8, vocabulary 65: rows
// 2048), per layer: each Linear's forward x·Wᵀ (NT), input gradient g·W
// (NN) and weight gradient gᵀ·x (TN); and per head (48 a layer) the
// attention's products, whose q, k and v rows lie 3·384 floats apart.
type gptShape struct {
	Name           string
	M, N, K        int
	TransA, TransB bool
	LDA, LDB       int // 0: packed
	PerStep        int // how many a step runs
}

var gptShapes = []gptShape{
	{"qkv_fwd_NT_2048x1152x384", 2048, 1152, 384, false, true, 0, 0, 6},
	{"qkv_dX_NN_2048x384x1152", 2048, 384, 1152, false, false, 0, 0, 6},
	{"qkv_dW_TN_1152x384x2048", 1152, 384, 2048, true, false, 0, 0, 6},
	{"proj_fwd_NT_2048x384x384", 2048, 384, 384, false, true, 0, 0, 6},
	{"proj_dX_NN_2048x384x384", 2048, 384, 384, false, false, 0, 0, 6},
	{"proj_dW_TN_384x384x2048", 384, 384, 2048, true, false, 0, 0, 6},
	{"fc_fwd_NT_2048x1536x384", 2048, 1536, 384, false, true, 0, 0, 6},
	{"fc_dX_NN_2048x384x1536", 2048, 384, 1536, false, false, 0, 0, 6},
	{"fc_dW_TN_1536x384x2048", 1536, 384, 2048, true, false, 0, 0, 6},
	{"mlp_fwd_NT_2048x384x1536", 2048, 384, 1536, false, true, 0, 0, 6},
	{"mlp_dX_NN_2048x1536x384", 2048, 1536, 384, false, false, 0, 0, 6},
	{"mlp_dW_TN_384x1536x2048", 384, 1536, 2048, true, false, 0, 0, 6},
	{"head_fwd_NT_2048x65x384", 2048, 65, 384, false, true, 0, 0, 1},
	{"head_dX_NN_2048x384x65", 2048, 384, 65, false, false, 0, 0, 1},
	{"head_dW_TN_65x384x2048", 65, 384, 2048, true, false, 0, 0, 1},
	{"att_qk_NT_256x256x64", 256, 256, 64, false, true, 1152, 1152, 2 * 288},
	{"att_pv_NN_256x64x256", 256, 64, 256, false, false, 0, 1152, 288},
	{"att_dV_TN_256x64x256", 256, 64, 256, true, false, 0, 64, 288},
	{"att_dS_NN_256x64x256", 256, 64, 256, false, false, 0, 1152, 288},
	{"att_dK_TN_256x64x256", 256, 64, 256, true, false, 0, 1152, 288},
	{"att_dP_NT_256x256x64", 256, 256, 64, false, true, 64, 1152, 288},
}

// BenchmarkGemmChoice times each of the GPT step's products on the pure-Go
// kernel and on OpenBLAS, on one thread, alternating call by call, in CPU
// time of the calling thread (CLOCK_THREAD_CPUTIME_ID): on a machine
// shared with other work the thread's CPU time measures the product's work
// where wall time measures mostly the others' load. It reports the median
// CPU time of each and their ratio: go/blas < 1 means the Go kernel wins.
// Both backends split large products the same way over the cores (blocks
// of C claimed by goroutines), so the one-thread ratio is the one that
// decides. Run it under FERRY_CPU=avx2 OPENBLAS_CORETYPE=Haswell for an
// AVX2-only CPU.
func BenchmarkGemmChoice(b *testing.B) {
	if !blas.Available() {
		b.Skip(blas.Reason())
	}
	if blasOwnThreads() {
		b.Skip("OpenBLAS keeps its own threads (FERRY_BLAS_THREADS=openblas)")
	}
	b.Logf("%s; the Go side is the %s kernel; OpenBLAS threads: %d", Paths(), gemm.Kernel(), blas.Threads())
	shapes := append([]gptShape(nil), gptShapes...)
	for _, n := range []int{8, 16, 32, 64, 96, 128} { // small squares, and one row
		shapes = append(shapes, gptShape{Name: fmt.Sprintf("small_NN_%d", n), M: n, N: n, K: n},
			gptShape{Name: fmt.Sprintf("small_NT_%d", n), M: n, N: n, K: n, TransB: true})
	}
	shapes = append(shapes, gptShape{Name: "row_NT_1x1152x384", M: 1, N: 1152, K: 384, TransB: true},
		gptShape{Name: "row_NN_1x384x1536", M: 1, N: 384, K: 1536})
	for _, s := range shapes {
		b.Run(s.Name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
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
			fill := func(n int) []float32 {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				return x
			}
			a, bb, c := fill(ar*lda), fill(br*ldb), fill(s.M*s.N)
			var ts unix.Timespec
			cpuNow := func() int64 {
				unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
				return ts.Nano()
			}
			var tGo, tBLAS []float64
			for i := 0; b.Loop(); i++ {
				t0 := cpuNow()
				if i%2 == 0 {
					gemm.SgemmSerial(s.TransA, s.TransB, s.M, s.N, s.K, 1, a, lda, bb, ldb, 0, c, s.N)
					tGo = append(tGo, float64(cpuNow()-t0))
				} else {
					blasSgemm(s.TransA, s.TransB, s.M, s.N, s.K, 1, a, lda, bb, ldb, 0, c, s.N)
					tBLAS = append(tBLAS, float64(cpuNow()-t0))
				}
			}
			if len(tBLAS) == 0 {
				return
			}
			slices.Sort(tGo)
			slices.Sort(tBLAS)
			g, o := tGo[len(tGo)/2], tBLAS[len(tBLAS)/2]
			flops := 2 * float64(s.M) * float64(s.N) * float64(s.K)
			b.ReportMetric(flops/g, "go_GFLOP/s")
			b.ReportMetric(flops/o, "blas_GFLOP/s")
			b.ReportMetric(g/o, "go/blas")
		})
	}
}
