package cpu

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"ferry/internal/blas"
)

// TestBLASSplit checks that a product cut into blocks of rows or columns
// (blasSplit) gives the same bits on one goroutine as on several, and
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
			blasSplit(tr[0], tr[1], s.m, s.n, s.k, 0.5, a, lda, b, ldb, 0.25, got, ldc)
			prev := runtime.GOMAXPROCS(1)
			one := append([]float32(nil), c0...)
			blasSplit(tr[0], tr[1], s.m, s.n, s.k, 0.5, a, lda, b, ldb, 0.25, one, ldc)
			runtime.GOMAXPROCS(prev)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(one[i]) {
					t.Fatalf("%v trans %v: c[%d] = %g split on %d goroutines, %g on one", s, tr, i, got[i], prev, one[i])
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
