package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

func skipIfUnavailable(tb testing.TB) {
	tb.Helper()
	if !Available() {
		tb.Skip("native BLAS unavailable: " + Reason())
	}
}

// naive computes C = alpha*op(A)*op(B) + beta*C with float64 accumulation
// and also returns, per element, sum |a||b| for error bounds.
func naive(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) (want, mag []float64) {
	want = make([]float64, m*n)
	mag = make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, abs float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
				abs += math.Abs(float64(av) * float64(bv))
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			want[i*n+j] = v
			mag[i*n+j] = math.Abs(float64(alpha))*abs + math.Abs(float64(beta)*float64(c[i*ldc+j]))
		}
	}
	return want, mag
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

func TestInfo(t *testing.T) {
	if !Available() {
		t.Logf("unavailable: %s", Reason())
		return
	}
	t.Logf("library %s, threads %d", Library(), Threads())
	if Reason() != "" {
		t.Errorf("Reason() = %q with a library loaded", Reason())
	}
}

// bothPaths runs f once through the sgemm_ (SyscallN) path, when the library
// exports it, and once through the cblas_sgemm (RegisterFunc) binding.
func bothPaths(t *testing.T, f func(t *testing.T)) {
	skipIfUnavailable(t)
	if fortranSgemm != 0 {
		t.Run("sgemm_", f)
	}
	t.Run("cblas", func(t *testing.T) {
		forceCBLAS = true
		defer func() { forceCBLAS = false }()
		f(t)
	})
}

func TestSgemm(t *testing.T) { bothPaths(t, testSgemm) }

func testSgemm(t *testing.T) {
	type shape struct{ m, n, k int }
	shapes := []shape{
		{1, 1, 1}, {7, 1, 33}, {1, 7, 1}, {33, 7, 1}, {7, 33, 33},
		{33, 33, 7}, {1, 1023, 7}, {1025, 7, 33}, {7, 1025, 1023},
		{33, 1023, 1025}, {1023, 33, 1025}, {1025, 1023, 7},
	}
	if testing.Short() {
		shapes = shapes[:8]
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range shapes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				name := fmt.Sprintf("m%d_n%d_k%d_tA%v_tB%v", s.m, s.n, s.k, ta, tb)
				t.Run(name, func(t *testing.T) {
					m, n, k := s.m, s.n, s.k
					ar, ac := m, k
					if ta {
						ar, ac = k, m
					}
					br, bc := k, n
					if tb {
						br, bc = n, k
					}
					lda, ldb, ldc := ac+3, bc+5, n+2
					a := randSlice(r, ar*lda)
					b := randSlice(r, br*ldb)
					c := randSlice(r, m*ldc)
					alpha, beta := float32(1.5), float32(-0.75)
					want, mag := naive(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
					orig := slices.Clone(c)
					SgemmSlices(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
					tol := 1e-6 * math.Sqrt(float64(k)+1) * 4
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							got := float64(c[i*ldc+j])
							w := want[i*n+j]
							if math.Abs(got-w) > tol*(mag[i*n+j]+1e-30) {
								t.Fatalf("C[%d,%d] = %g, want %g (mag %g)", i, j, got, w, mag[i*n+j])
							}
						}
						for j := n; j < ldc; j++ {
							if c[i*ldc+j] != orig[i*ldc+j] {
								t.Fatalf("padding C[%d,%d] modified", i, j)
							}
						}
					}
				})
			}
		}
	}
}

func TestSgemmBetaZeroIgnoresNaN(t *testing.T) { bothPaths(t, testSgemmBetaZeroIgnoresNaN) }

func testSgemmBetaZeroIgnoresNaN(t *testing.T) {
	m, n, k := 17, 19, 23
	r := rand.New(rand.NewPCG(3, 4))
	a, b := randSlice(r, m*k), randSlice(r, k*n)
	c := make([]float32, m*n)
	for i := range c {
		c[i] = float32(math.NaN())
	}
	want, _ := naive(false, false, m, n, k, 2, a, k, b, n, 0, make([]float32, m*n), n)
	SgemmSlices(false, false, m, n, k, 2, a, k, b, n, 0, c, n)
	for i, v := range c {
		if math.IsNaN(float64(v)) || math.Abs(float64(v)-want[i]) > 1e-4 {
			t.Fatalf("C[%d] = %v, want %v", i, v, want[i])
		}
	}
}

func TestSgemmPointer(t *testing.T) { bothPaths(t, testSgemmPointer) }

func testSgemmPointer(t *testing.T) {
	a := []float32{1, 2, 3, 4} // 2x2
	b := []float32{5, 6, 7, 8} // 2x2
	c := []float32{1, 1, 1, 1} // 2x2
	Sgemm(false, true, 2, 2, 2, 1, unsafe.Pointer(&a[0]), 2, unsafe.Pointer(&b[0]), 2, 1, unsafe.Pointer(&c[0]), 2)
	// A*B^T = [[1*5+2*6, 1*7+2*8],[3*5+4*6, 3*7+4*8]] = [[17,23],[39,53]]
	want := []float32{18, 24, 40, 54}
	for i := range c {
		if c[i] != want[i] {
			t.Fatalf("c = %v, want %v", c, want)
		}
	}
}

func TestSgemmSlicesPanics(t *testing.T) {
	skipIfUnavailable(t)
	defer func() {
		if recover() == nil {
			t.Fatal("expected panic for short slice")
		}
	}()
	SgemmSlices(false, false, 4, 4, 4, 1, make([]float32, 15), 4, make([]float32, 16), 4, 0, make([]float32, 16), 4)
}

func TestThreads(t *testing.T) {
	skipIfUnavailable(t)
	n := Threads()
	if n == 0 {
		t.Skip("library does not export openblas_get_num_threads")
	}
	if !SetThreads(1) || Threads() != 1 {
		t.Fatalf("SetThreads(1) did not take effect: Threads() = %d", Threads())
	}
	SetThreads(n)
}

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

func BenchmarkSgemm(b *testing.B) {
	skipIfUnavailable(b)
	for _, s := range benchShapes {
		b.Run(s.name, func(b *testing.B) {
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
			b.ResetTimer()
			for b.Loop() {
				SgemmSlices(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
			}
			flops := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N)
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkSgemmCallOverhead measures the fixed cost of a call through
// purego on a 1×1×1 product.
func BenchmarkSgemmCallOverhead(b *testing.B) {
	skipIfUnavailable(b)
	a, bb, c := []float32{1}, []float32{2}, []float32{0}
	run := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Sgemm(false, false, 1, 1, 1, 1, unsafe.Pointer(&a[0]), 1, unsafe.Pointer(&bb[0]), 1, 0, unsafe.Pointer(&c[0]), 1)
		}
		if c[0] != 2 {
			b.Fatalf("c = %v, want 2", c[0])
		}
	}
	if fortranSgemm != 0 {
		b.Run("sgemm_", run)
	}
	b.Run("cblas", func(b *testing.B) {
		forceCBLAS = true
		defer func() { forceCBLAS = false }()
		run(b)
	})
}

func TestSgemmDegenerate(t *testing.T) { bothPaths(t, testSgemmDegenerate) }

func testSgemmDegenerate(t *testing.T) {
	// k == 0: C = beta*C.
	c := []float32{1, 2, 3, 4, 5, 6}
	SgemmSlices(false, false, 2, 3, 0, 1, nil, 1, nil, 3, 2, c, 3)
	if want := []float32{2, 4, 6, 8, 10, 12}; !slices.Equal(c, want) {
		t.Fatalf("k=0: c = %v, want %v", c, want)
	}
	// m == 0 and n == 0 are no-ops.
	SgemmSlices(false, false, 0, 3, 2, 1, nil, 2, make([]float32, 6), 3, 0, nil, 3)
	SgemmSlices(false, false, 2, 0, 2, 1, make([]float32, 4), 2, nil, 1, 0, nil, 1)
}
