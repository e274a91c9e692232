package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

// allKernels returns every micro-kernel variant this CPU supports, sorted
// by name ("avx2/6x16", "avx512/14x32", "avx512/6x64", "generic/4x8").
func allKernels() []*kernelInfo {
	var ks []*kernelInfo
	for _, f := range families {
		ks = append(ks, f.variants...)
	}
	slices.SortFunc(ks, func(x, y *kernelInfo) int { return strings.Compare(x.name, y.name) })
	return ks
}

// forceParallel makes even tiny products use the parallel grid with many
// blocks, until the returned function is called.
func forceParallel() (restore func()) {
	pt, mb := parallelThreshold, minBlockWork
	parallelThreshold, minBlockWork = 0, 1
	return func() { parallelThreshold, minBlockWork = pt, mb }
}

type shape struct{ m, n, k int }

func testShapes() []shape {
	s := []shape{
		{1, 1, 1}, {1, 7, 16}, {7, 1, 31}, {7, 7, 7}, {16, 16, 16}, {31, 31, 31},
		{16, 31, 7}, {31, 16, 1}, {14, 32, 5}, {6, 64, 17}, {24, 64, 300}, {37, 70, 513},
		{1, 1023, 16}, {1023, 1, 31}, {13, 33, 1023}, {100, 130, 260},
		{200, 300, 100}, {129, 150, 140}, // parallel path
	}
	if !testing.Short() {
		s = append(s, shape{1025, 7, 1023}, shape{7, 1025, 1023}, shape{1023, 1025, 7},
			shape{31, 1025, 1023}, shape{1025, 31, 1025})
	}
	return s
}

// testCase is a product with its float64 reference result.
type testCase struct {
	ta, tb        bool
	m, n, k       int
	alpha, beta   float32
	a, b, c       []float32 // c is the initial C (NaN-filled when beta == 0)
	lda, ldb, ldc int
	want, bound   []float64 // reference C and the allowed |error| per element
}

// newCase builds a random product with non-minimal leading dimensions.
func newCase(r *rand.Rand, ta, tb bool, s shape, alpha, beta float32) *testCase {
	m, n, k := s.m, s.n, s.k
	ar, ac := m, k
	if ta {
		ar, ac = k, m
	}
	br, bc := k, n
	if tb {
		br, bc = n, k
	}
	tc := &testCase{ta: ta, tb: tb, m: m, n: n, k: k, alpha: alpha, beta: beta,
		lda: ac + 3, ldb: bc + 1, ldc: n + 5}
	tc.a = randSlice(r, ar*tc.lda)
	tc.b = randSlice(r, br*tc.ldb)
	tc.c = randSlice(r, m*tc.ldc)
	if beta == 0 {
		for i := range tc.c {
			tc.c[i] = float32(math.NaN())
		}
	}
	tc.reference()
	return tc
}

// reference computes the float64 result of tc's operands and its error
// bound.
func (tc *testCase) reference() {
	ta, tb, m, n, k, alpha, beta := tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, tc.beta
	// Reference in float64; error bound 1e-5*sqrt(k) relative to
	// Σ|alpha a b| + |beta c|.
	tol := 1e-5 * math.Sqrt(float64(k)+1)
	tc.want = make([]float64, m*n)
	tc.bound = make([]float64, m*n)
	at := func(i, p int) float64 {
		if ta {
			return float64(tc.a[p*tc.lda+i])
		}
		return float64(tc.a[i*tc.lda+p])
	}
	bt := func(p, j int) float64 {
		if tb {
			return float64(tc.b[j*tc.ldb+p])
		}
		return float64(tc.b[p*tc.ldb+j])
	}
	col := make([]float64, k)
	for j := 0; j < n; j++ {
		for p := range col {
			col[p] = bt(p, j)
		}
		for i := 0; i < m; i++ {
			var s, mag float64
			for p, bv := range col {
				x := at(i, p) * bv
				s += x
				mag += math.Abs(x)
			}
			v := float64(alpha) * s
			mag *= math.Abs(float64(alpha))
			if beta != 0 {
				cv := float64(beta) * float64(tc.c[i*tc.ldc+j])
				v += cv
				mag += math.Abs(cv)
			}
			tc.want[i*n+j] = v
			tc.bound[i*n+j] = tol*mag + 1e-30
		}
	}
}

func (tc *testCase) name() string {
	return fmt.Sprintf("m%d_n%d_k%d_tA%v_tB%v_a%v_b%v", tc.m, tc.n, tc.k, tc.ta, tc.tb, tc.alpha, tc.beta)
}

// run computes the product with kern and nw workers and returns C.
func (tc *testCase) run(kern *kernelInfo, nw int) []float32 {
	c := slices.Clone(tc.c)
	sgemm(kern, nw, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, tc.b, tc.ldb, tc.beta, c, tc.ldc)
	return c
}

// check compares got with the reference and verifies that the padding
// columns of C are untouched.
func (tc *testCase) check(t *testing.T, got []float32) {
	t.Helper()
	for i := 0; i < tc.m; i++ {
		for j := 0; j < tc.ldc; j++ {
			g := got[i*tc.ldc+j]
			if j >= tc.n {
				if math.Float32bits(g) != math.Float32bits(tc.c[i*tc.ldc+j]) {
					t.Fatalf("padding C[%d,%d] modified: %g, was %g", i, j, g, tc.c[i*tc.ldc+j])
				}
				continue
			}
			w, bound := tc.want[i*tc.n+j], tc.bound[i*tc.n+j]
			if d := math.Abs(float64(g) - w); !(d <= bound) {
				t.Fatalf("C[%d,%d] = %g, want %g (|diff| %g > bound %g)", i, j, g, w, d, bound)
			}
		}
	}
}

// TestSgemmKernels checks every kernel variant on all shapes, transposes and
// scalars, single-threaded, with the default parallel split and with a
// forced fine-grained parallel grid.
func TestSgemmKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	nw := max(2, runtime.GOMAXPROCS(0))
	kernels := allKernels()
	for _, s := range testShapes() {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, ab := range [][2]float32{{1, 0}, {-1.5, 0.75}, {0.5, 1}} {
					tc := newCase(r, ta, tb, s, ab[0], ab[1])
					t.Run(tc.name(), func(t *testing.T) {
						for _, kern := range kernels {
							t.Run(kern.name, func(t *testing.T) {
								tc.check(t, tc.run(kern, 1))
								tc.check(t, tc.run(kern, nw))
								restore := forceParallel()
								defer restore()
								tc.check(t, tc.run(kern, 3))
							})
						}
					})
					if s.m*s.n*s.k > 1e6 {
						break // one scalar pair is enough for the big shapes
					}
				}
			}
		}
	}
}

// TestFMAKernelsAgree checks that all FMA kernels (every variant except
// generic) give bitwise-identical results, whatever the worker count.
func TestFMAKernelsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var fma []*kernelInfo
	for _, k := range allKernels() {
		if !strings.HasPrefix(k.name, "generic") {
			fma = append(fma, k)
		}
	}
	if len(fma) < 2 {
		t.Skipf("only %d FMA kernel(s) on this CPU", len(fma))
	}
	restore := forceParallel()
	defer restore()
	for _, s := range []shape{{37, 70, 513}, {100, 33, 600}, {64, 128, 256}} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				tc := newCase(r, ta, tb, s, 0.75, -1.25)
				ref := tc.run(fma[0], 1)
				for _, k := range fma {
					for _, nw := range []int{1, 2, 5} {
						if got := tc.run(k, nw); !slices.Equal(got, ref) {
							t.Fatalf("%s: %s with %d workers differs from %s", tc.name(), k.name, nw, fma[0].name)
						}
					}
				}
			}
		}
	}
}

func TestKernelSelection(t *testing.T) {
	t.Logf("Kernel() = %s; supported %v; variants %d", Kernel(), Kernels(), len(active.variants))
	if Kernel() != Kernels()[0] && !strings.Contains(strings.Join(Kernels(), ","), Kernel()) {
		t.Fatalf("Kernel() = %q not in %v", Kernel(), Kernels())
	}
	if want := os.Getenv("FERRY_GEMM_KERNEL"); want != "" && families[want] != nil && Kernel() != want {
		t.Errorf("FERRY_GEMM_KERNEL=%s but Kernel() = %s", want, Kernel())
	}
	if f := families["avx512"]; f != nil {
		if k := f.pick(1024, 1024); k.nr != 64 {
			t.Errorf("pick(1024,1024) = %s, want the 6×64 kernel", k.name)
		}
		if k := f.pick(1024, 10); k.nr != 32 {
			t.Errorf("pick(1024,10) = %s, want the 14×32 kernel", k.name)
		}
	}
}

func TestSgemmPublic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range []shape{{70, 90, 110}, {300, 310, 290}} {
		tc := newCase(r, false, true, s, 2, -1)
		c := slices.Clone(tc.c)
		Sgemm(tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, tc.b, tc.ldb, tc.beta, c, tc.ldc)
		tc.check(t, c)
		// Naive agrees with the reference too.
		c = slices.Clone(tc.c)
		Naive(tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, tc.b, tc.ldb, tc.beta, c, tc.ldc)
		tc.check(t, c)
	}
}

func TestSgemmSpecialScalars(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	m, n, k := 9, 11, 13
	a, b := randSlice(r, m*k), randSlice(r, k*n)
	nan := float32(math.NaN())
	// alpha == 0: A and B are not read (NaN would propagate), C = beta*C.
	an := slices.Repeat([]float32{nan}, max(m, n)*k)
	c := randSlice(r, m*n)
	want := slices.Clone(c)
	for i := range want {
		want[i] *= 3
	}
	Sgemm(false, false, m, n, k, 0, an, k, an, n, 3, c, n)
	if !slices.Equal(c, want) {
		t.Fatalf("alpha=0: got %v want %v", c, want)
	}
	// alpha == 0, beta == 0: C = 0 without reading.
	c = slices.Repeat([]float32{nan}, m*n)
	Sgemm(false, false, m, n, k, 0, a, k, b, n, 0, c, n)
	if !slices.Equal(c, make([]float32, m*n)) {
		t.Fatalf("alpha=beta=0: got %v", c)
	}
	// k == 0: C = beta*C.
	c = []float32{1, 2, 3, 4}
	Sgemm(false, false, 2, 2, 0, 1, nil, 1, nil, 2, -2, c, 2)
	if !slices.Equal(c, []float32{-2, -4, -6, -8}) {
		t.Fatalf("k=0: got %v", c)
	}
	// Empty C.
	Sgemm(false, false, 0, 5, 5, 1, nil, 5, b, 5, 0, nil, 5)
	// beta == -0 behaves like beta == 0 (C not read), for every kernel.
	for _, kern := range allKernels() {
		c = slices.Repeat([]float32{nan}, m*n)
		sgemm(kern, 1, true, true, m, n, k, 1, a, m, b, k, float32(math.Copysign(0, -1)), c, n)
		for i, v := range c {
			if math.IsNaN(float64(v)) {
				t.Fatalf("%s beta=-0: C[%d] is NaN", kern.name, i)
			}
		}
	}
}

func TestSgemmPanics(t *testing.T) {
	f16, f15 := make([]float32, 16), make([]float32, 15)
	cases := map[string]func(){
		"short a":  func() { Sgemm(false, false, 4, 4, 4, 1, f15, 4, f16, 4, 0, f16, 4) },
		"short b":  func() { Sgemm(false, true, 4, 4, 4, 1, f16, 4, f15, 4, 0, f16, 4) },
		"short c":  func() { Sgemm(false, false, 4, 4, 4, 1, f16, 4, f16, 4, 0, f15, 4) },
		"small ld": func() { Sgemm(false, false, 4, 4, 4, 1, f16, 3, f16, 4, 0, f16, 4) },
		"negative": func() { Sgemm(false, false, -1, 4, 4, 1, nil, 4, nil, 4, 0, nil, 4) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

// TestDeterministic checks that results are bitwise identical across runs,
// worker counts and grid shapes, for every kernel.
func TestDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	tc := newCase(r, false, true, shape{301, 517, 700}, 1.25, 0.5)
	for _, kern := range allKernels() {
		ref := tc.run(kern, 1)
		for _, nw := range []int{2, 3, 4, 7} {
			if got := tc.run(kern, nw); !slices.Equal(ref, got) {
				t.Fatalf("%s: result with %d workers differs from 1 worker", kern.name, nw)
			}
		}
		restore := forceParallel()
		got := tc.run(kern, 3)
		restore()
		if !slices.Equal(ref, got) {
			t.Fatalf("%s: result with a fine grid differs from 1 worker", kern.name)
		}
	}
}

// TestConcurrentCalls runs several products at once from different
// goroutines (sharing the helper pool).
func TestConcurrentCalls(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	var cases []*testCase
	for i := range 4 {
		cases = append(cases, newCase(r, i%2 == 0, i/2 == 0, shape{150 + i, 170, 160}, 1, 0.5))
	}
	done := make(chan []float32, len(cases))
	for _, tc := range cases {
		go func() { done <- tc.run(active.pick(tc.m, tc.n), 2) }()
	}
	for range cases {
		<-done
	}
	for _, tc := range cases {
		tc.check(t, tc.run(active.pick(tc.m, tc.n), 2))
	}
}

func TestSetWorkers(t *testing.T) {
	def := runtime.GOMAXPROCS(0)
	old := SetWorkers(3)
	defer SetWorkers(old)
	if numWorkers() != 3 {
		t.Fatalf("numWorkers() = %d after SetWorkers(3)", numWorkers())
	}
	if got := SetWorkers(0); got != 3 {
		t.Fatalf("SetWorkers returned %d, want 3", got)
	}
	if got := numWorkers(); got != def {
		t.Fatalf("after SetWorkers(0): numWorkers() = %d, want GOMAXPROCS %d", got, def)
	}
	if got := SetWorkers(1); got != def {
		t.Fatalf("SetWorkers returned %d, want the default %d", got, def)
	}
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	r := rand.New(rand.NewPCG(9, 10))
	for _, sz := range []int{64, 256} {
		m, n, k := sz, sz, sz
		a, b, c := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
		Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n) // warm pools
		allocs := testing.AllocsPerRun(20, func() {
			Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
		})
		// Parallel calls allocate the shared problem descriptor.
		limit := 0.0
		if float64(sz*sz*sz) >= parallelThreshold && numWorkers() > 1 {
			limit = 1
		}
		t.Logf("%d^3: %.1f allocations per call", sz, allocs)
		if allocs > limit {
			t.Errorf("%d^3: Sgemm allocates %.1f objects per call, want <= %v", sz, allocs, limit)
		}
	}
}
